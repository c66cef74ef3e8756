"""The image engine on Docker: the engine's socket where the local engine allows, else the command.

Inspections, the ones a start asks, go over the engine's unix socket when the engine is plain
local (`DockerCli.socket_api`); everything else, and every inspection on a remote engine or
another context, runs the `docker` command the user has configured. Builds stream their log
lines; `save` and `export_path` hand over the command's output pipe, so an archive flows to
its reader without passing through this process's memory."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.naming import LABEL_MANAGED, TOOL
from opencode_sandbox.engine.command import DockerCli, DockerFailed, engine_failure, first_line
from opencode_sandbox.engine.socket_client import ApiUnavailable
from opencode_sandbox.engine.types import BuildOutcome, ListedImage
from opencode_sandbox.errors import NotFound, RuntimeUnavailable, SandboxError

if TYPE_CHECKING:
    import subprocess
    from datetime import datetime
    from typing import IO, Any

DOCTOR_HINT = "Start the Docker engine (or Docker Desktop), then retry; `opencode-sandbox doctor` checks the setup."
DOCKER_START_HINT = (
    "start the Docker engine (for example `sudo systemctl start docker`, or run `dockerd`), "
    "and make sure this user may use it (`sudo usermod -aG docker $USER`)"
)
_READ_HINT = "check that Docker is running (`docker info`) and the image exists (`docker images`)"
_MISSING = ("no such image", "no such object", "not found")
_NONE = "<none>"
PULL_TIMEOUT_S = 1800.0


class DockerImageEngine:
    """`ImageEngine` on the Docker engine the user's environment selects."""

    def __init__(self, cli: DockerCli | None = None) -> None:
        self.cli = cli or DockerCli()

    def engine_version(self, timeout_s: float = 15.0) -> str:
        import shutil

        if shutil.which(self.cli.executable) is None:
            raise RuntimeUnavailable("the docker command is not installed",
                                     hint="install Docker (for example `apt-get install docker.io`)")
        try:
            completed = self.cli.run_raw(["version", "--format", "{{json .Server}}"], timeout_s=timeout_s)
        except RuntimeUnavailable:  # the command is there: it timed out
            raise RuntimeUnavailable("the Docker engine did not answer in time", hint=DOCKER_START_HINT) from None
        server = completed.stdout.decode(errors="replace").strip()
        if completed.returncode != 0 or server in ("", "null"):
            reason = (completed.stderr.decode(errors="replace").strip().splitlines() or ["no answer"])[-1]
            raise RuntimeUnavailable(f"the Docker engine is not reachable: {reason}", hint=DOCKER_START_HINT)
        try:
            return str(json.loads(server).get("Version", "?"))
        except (ValueError, AttributeError):
            return "?"

    # inspections ---------------------------------------------------------------------------
    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        return self.inspect_images([reference]).get(reference)

    def inspect_images(self, references: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not references:
            return {}
        through_socket = self._inspect_through_socket(references)
        if through_socket is not None:
            return through_socket
        completed = self.cli.run_raw(["image", "inspect", *references])
        stdout = completed.stdout.decode(errors="replace")
        stderr = completed.stderr.decode(errors="replace")
        try:
            documents = json.loads(stdout or "[]")
        except json.JSONDecodeError:
            documents = []
        if completed.returncode != 0:
            failure = engine_failure(stderr)
            if failure is not None:
                raise failure
            if not documents and "no such" not in stderr.lower():
                raise SandboxError(
                    "docker image inspect failed: " + (stderr.strip().splitlines() or ["?"])[-1], hint=DOCTOR_HINT
                )
        if len(references) == 1:
            return {references[0]: documents[0]} if documents else {}
        found: dict[str, dict[str, Any]] = {}
        for reference in references:
            for document in documents:
                if _names_reference(document, reference):
                    found[reference] = document
                    break
        return found

    def _inspect_through_socket(self, references: Sequence[str]) -> dict[str, dict[str, Any]] | None:
        """The same documents over the engine's local socket; None to use the command."""
        api = self.cli.socket_api()
        if api is None:
            return None
        found: dict[str, dict[str, Any]] = {}
        try:
            for reference in references:
                document = api.inspect("image", reference)
                if document is not None:
                    found[reference] = document
        except ApiUnavailable:
            self.cli.give_up_socket()
            return None
        return found

    def list_images(self, labels: Mapping[str, str], include_tagged: bool) -> list[ListedImage]:
        args = ["image", "ls", "--no-trunc", "--format", "{{.ID}}\t{{.Repository}}\t{{.Tag}}\t{{.CreatedAt}}"]
        if not include_tagged:
            args += ["--filter", "dangling=true"]
        for key, value in sorted(labels.items()):
            args += ["--filter", f"label={key}={value}"]
        try:
            listed = self.cli.run(args)
        except DockerFailed as failure:
            raise SandboxError("cannot list Docker images: " + _last_line(failure.stderr), hint=DOCTOR_HINT) from None
        images: list[ListedImage] = []
        for line in listed.splitlines():
            fields = line.split("\t")
            if len(fields) != 4:
                continue
            image_id, repository, tag, created_text = fields
            if repository == _NONE and tag == _NONE:
                images.append(ListedImage(image_id, None, parse_created(created_text)))
            elif include_tagged and repository != _NONE and tag != _NONE:
                images.append(ListedImage(image_id, f"{repository}:{tag}", parse_created(created_text)))
        return images

    # changes -------------------------------------------------------------------------------
    def pull(self, reference: str) -> None:
        try:
            self.cli.run(["pull", "--quiet", reference], timeout_s=PULL_TIMEOUT_S)
        except DockerFailed as failure:
            raise SandboxError(
                f"cannot pull the base image {reference}: {_last_line(failure.stderr)}",
                hint=f"Check the image name and your registry access (docker login), or provide {reference} locally.",
            ) from None

    def build(
        self,
        context_dir: Path,
        *,
        tag: str,
        labels: Mapping[str, str],
        build_args: Mapping[str, str],
        no_cache: bool,
        on_line: Callable[[str], None],
    ) -> BuildOutcome:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="opencode-sandbox-iid-") as temporary:
            iid_file = Path(temporary) / "image-id"
            args = ["build", "--rm", "--force-rm", "--iidfile", str(iid_file), "-t", tag]
            for name, value in sorted(labels.items()):
                args += ["--label", f"{name}={value}"]
            for name, value in sorted(build_args.items()):
                args += ["--build-arg", f"{name}={value}"]
            if no_cache:
                args.append("--no-cache")
            args.append(str(context_dir))
            exit_code = self.cli.stream(args, on_line, extra_env={"BUILDKIT_PROGRESS": "plain"})
            image_id = iid_file.read_text().strip() if exit_code == 0 and iid_file.is_file() else ""
        return BuildOutcome(exit_code, image_id or None)

    def tag(self, source: str, target: str) -> None:
        try:
            self.cli.run(["image", "tag", source, target])
        except DockerFailed as failure:
            if failure.is_missing:
                raise _image_missing(source) from None
            raise SandboxError(f"cannot tag docker image {source} as {target}: {_engine_words(failure)}",
                               hint=DOCTOR_HINT) from None

    def remove_image(self, name: str) -> None:
        try:
            self.cli.run(["image", "rm", name])
        except DockerFailed as failure:
            message = _last_line(failure.stderr)
            if any(marker in message.lower() for marker in _MISSING):
                raise NotFound(f"docker image {name} does not exist", hint="nothing to do") from None
            raise SandboxError(
                f"cannot remove docker image {name}: {message.removeprefix('Error response from daemon: ')}",
                hint="remove the containers that use it first",
            ) from None

    # streams -------------------------------------------------------------------------------
    @contextmanager
    def save(self, reference: str) -> Iterator[IO[bytes]]:
        saver = self.cli.open_output(["save", reference])
        assert saver.stdout is not None
        try:
            yield saver.stdout
        finally:
            errors = _finished(saver)
        if saver.returncode != 0:
            raise engine_failure(errors) or _missing_or(
                reference, errors, SandboxError(f"docker save {reference} failed: {errors}",
                                                hint="check `docker info` and that the image exists"))

    @contextmanager
    def export_path(self, image: str, path: str) -> Iterator[IO[bytes]]:
        """`docker create` of a container that never starts, `docker cp` out of it, then its removal."""
        import uuid

        if self.inspect_image(image) is None:
            raise _image_missing(image)
        container = f"{TOOL}-fill-{uuid.uuid4().hex[:12]}"
        try:
            self.cli.run(["create", "--pull", "never", "--name", container, "--label", f"{LABEL_MANAGED}=true",
                          image, "true"])
        except DockerFailed as failure:
            raise SandboxError(f"cannot read image {image}: {failure.stderr}", hint=_READ_HINT) from None
        try:
            copier = self.cli.open_output(["cp", f"{container}:{path.rstrip('/') or '/'}", "-"])
            assert copier.stdout is not None
            try:
                yield copier.stdout
            finally:
                errors = _finished(copier)
            if copier.returncode != 0:
                raise SandboxError(f"cannot copy {path} out of image {image}: {errors}", hint=_READ_HINT)
        finally:
            self.cli.run_raw(["rm", "--force", container])


def _finished(process: subprocess.Popen[bytes]) -> str:
    """Close our end of the process's output, wait for it, and return what it wrote on stderr."""
    if process.stdout is not None:
        process.stdout.close()  # a process still writing gets SIGPIPE: its reader is done
    errors = process.stderr.read() if process.stderr is not None else b""
    if process.stderr is not None:
        process.stderr.close()
    process.wait()
    return errors.decode(errors="replace").strip()


def _image_missing(reference: str) -> NotFound:
    return NotFound(f"image {reference} is not in the Docker engine", hint="run `opencode-sandbox build`")


def _missing_or(reference: str, stderr: str, otherwise: SandboxError) -> SandboxError:
    lowered = stderr.lower()
    if "no such image" in lowered or "reference does not exist" in lowered:
        return _image_missing(reference)
    return otherwise


def _engine_words(failure: DockerFailed) -> str:
    return first_line(failure.stderr).removeprefix("Error response from daemon: ") or failure.message


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def parse_created(text: str) -> datetime | None:
    """`docker image ls`'s CreatedAt: `2026-01-02 03:04:05 +0000 UTC`."""
    from datetime import datetime

    try:
        return datetime.strptime(" ".join(text.split()[:3]), "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return None


def _names_reference(document: Mapping[str, Any], reference: str) -> bool:
    if document.get("Id") == reference:
        return True
    tags = [*(document.get("RepoTags") or []), *(document.get("RepoDigests") or [])]
    candidates = {reference}
    if ":" not in reference.rsplit("/", 1)[-1] and "@" not in reference:
        candidates.add(reference + ":latest")
    if "/" not in reference.split(":", 1)[0]:
        candidates |= {"docker.io/library/" + c for c in candidates} | {"library/" + c for c in candidates}
    return any(tag in candidates for tag in tags)
