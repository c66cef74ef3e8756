"""The image engine: where runner images are built, inspected, listed, saved and removed.

`base.ImageEngine` is the interface; `docker.DockerImageEngine` its one implementation. The
package also holds the one wrapper of the `docker` command (`command`) and the one client of
the engine's socket (`socket_client`), which the docker runtime backend shares."""
