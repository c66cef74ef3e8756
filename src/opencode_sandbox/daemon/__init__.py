"""The HTTP API of the opencode daemon (`opencode serve`) running in the project VM."""
