"""The `docker` command line as a subprocess: honours the user's contexts, streams builds."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opencode_sandbox.errors import RuntimeUnavailable, SandboxError
from opencode_sandbox.runtime.docker_api import ApiUnavailable, DockerApi, forget_read_ahead
from opencode_sandbox.runtime.docker_cli import engine_failure

DOCTOR_HINT = "Start the Docker engine (or Docker Desktop), then retry; `opencode-sandbox doctor` checks the setup."


class DockerCli:
    def __init__(self, executable: str = "docker", env: Mapping[str, str] | None = None) -> None:
        self.executable = executable
        self.env = dict(env) if env is not None else None

    def _inspect_through_api(self, references: Sequence[str]) -> dict[str, dict[str, Any]] | None:
        """The same documents over the engine's local socket; None to use the command."""
        if self.executable != "docker" or self.env is not None:
            return None
        api = DockerApi.for_environment()
        if api is None:
            return None
        found: dict[str, dict[str, Any]] = {}
        try:
            for reference in references:
                document = api.inspect("image", reference)
                if document is not None:
                    found[reference] = document
        except ApiUnavailable:
            return None
        return found

    def _argv(self, args: Sequence[str]) -> list[str]:
        """The command line of a docker command about to run, which may change the engine's answers."""
        import shutil

        forget_read_ahead()

        resolved = shutil.which(self.executable)
        if resolved is None:
            raise RuntimeUnavailable(
                f"the `{self.executable}` command was not found",
                hint="Install Docker (it builds the runner image); `opencode-sandbox doctor` checks the setup.",
            )
        return [resolved, *args]

    def _environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        environment = dict(self.env if self.env is not None else os.environ)
        environment.update(extra or {})
        return environment

    def run(self, args: Sequence[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run to completion; engine trouble raises RuntimeUnavailable, other failures return."""
        try:
            result = subprocess.run(
                self._argv(args),
                capture_output=True,
                text=True,
                env=self._environment(),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeUnavailable(
                f"`docker {args[0]}` did not answer within {timeout:.0f} s",
                hint=DOCTOR_HINT,
            ) from None
        if result.returncode != 0:
            failure = engine_failure(result.stderr)
            if failure is not None:
                raise failure
        return result

    def inspect_images(self, references: Sequence[str]) -> dict[str, dict[str, Any]]:
        """`docker image inspect` of several references at once; missing ones are left out."""
        if not references:
            return {}
        through_socket = self._inspect_through_api(references)
        if through_socket is not None:
            return through_socket
        result = self.run(["image", "inspect", *references])
        try:
            documents = json.loads(result.stdout or "[]")
        except json.JSONDecodeError:
            documents = []
        if result.returncode != 0 and not documents and "no such" not in result.stderr.lower():
            raise SandboxError(
                "docker image inspect failed: " + (result.stderr.strip().splitlines() or ["?"])[-1],
                hint=DOCTOR_HINT,
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

    def pull(self, reference: str) -> None:
        result = self.run(["pull", "--quiet", reference], timeout=1800)
        if result.returncode != 0:
            detail = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
            raise SandboxError(
                f"cannot pull the base image {reference}: {detail}",
                hint=f"Check the image name and your registry access (docker login), or provide {reference} locally.",
            )

    def stream(
        self,
        args: Sequence[str],
        on_line: Callable[[str], None],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> int:
        """Run with stdout and stderr merged, handing over each line; return the exit code."""
        process = subprocess.Popen(
            self._argv(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._environment(extra_env),
            text=True,
            errors="replace",
            bufsize=1,
        )
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                on_line(line.rstrip("\n"))
        return process.wait()


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
