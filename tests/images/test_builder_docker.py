"""The builder against the real Docker engine, on top of the session's base image."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from opencode_sandbox.cli.render import short_digest
from opencode_sandbox.core.naming import (
    LABEL_CONTENT_HASH,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OPENCODE_VERSION,
    LABEL_SLUG,
    runner_repository,
)
from opencode_sandbox.core.units import format_size
from opencode_sandbox.engine.command import DockerCli
from opencode_sandbox.engine.docker import DockerImageEngine
from opencode_sandbox.errors import RuntimeUnavailable, SandboxError, UsageError
from opencode_sandbox.images.builder import (
    BuildAction,
    BuildFailed,
    ImageBuildResult,
    ensure_project_image,
    plan_project_image,
)
from opencode_sandbox.images.progress import SilentProgress
from opencode_sandbox.runtime.docker.backend import DockerRuntime
from tests.fixtures.images import RunnerBase
from tests.images.certs import real_pem

pytestmark = pytest.mark.docker

# opencode releases other than the session's, to prove that a version change rebuilds.
OTHER_OPENCODE_VERSIONS = ("1.18.32", "1.18.33")


class RecordingDocker(DockerCli):
    """The real CLI, remembering every `docker build` it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.builds: list[list[str]] = []

    def stream(
        self,
        args: Sequence[str],
        on_line: Callable[[str], None],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> int:
        if args and args[0] == "build":
            self.builds.append(list(args))
        return super().stream(args, on_line, extra_env=extra_env)


class Project:
    def __init__(self, root: Path, slug: str, base: RunnerBase) -> None:
        self.root = root
        self.slug = slug
        self.base = base
        self.docker = RecordingDocker()
        self.engine = DockerImageEngine(self.docker)

    @property
    def folder(self) -> Path:
        return self.root / ".opencode-sandbox"

    def write(self, name: str, text: str) -> None:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def ensure(self, **overrides: object) -> ImageBuildResult:
        arguments: dict[str, object] = {
            "project_dir": self.root,
            "slug": self.slug,
            "dind": False,
            "opencode_version": self.base.opencode_version,
            "trust_host_ca": True,
            "progress": SilentProgress(),
            "engine": self.engine,
        }
        arguments.update(overrides)
        return ensure_project_image(**arguments)  # type: ignore[arg-type]


def image_ids(*filters: str) -> set[str]:
    args = ["docker", "image", "ls", "--all", "--quiet", "--no-trunc"]
    for item in filters:
        args += ["--filter", item]
    return set(subprocess.run(args, capture_output=True, text=True, check=True).stdout.split())


def image_exists(reference: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", reference], capture_output=True).returncode == 0


def remove_images(ids: set[str]) -> None:
    if ids:
        subprocess.run(["docker", "image", "rm", "--force", *sorted(ids)], capture_output=True, check=False)


@pytest.fixture
def project(tmp_path: Path, unique: str, runner_base_image: RunnerBase) -> Iterator[Project]:
    slug = f"imgtest-{(unique + '0' * 14)[:14]}"
    root = tmp_path / "project"
    root.mkdir()
    try:
        yield Project(root, slug, runner_base_image)
    finally:
        for _ in range(3):  # an agent's layer first: the engine keeps an image another is built on
            remove_images(image_ids(f"label={LABEL_SLUG}={slug}"))


DOCKERFILE = (
    "FROM opencode-sandbox/runner-base:latest\n"
    "USER root\n"
    "COPY tools/ /opt/tools/\n"
    "ENV PATH=/opt/tools:$PATH \\\n"
    '    PROJECT_FLAVOUR="mint tea"\n'
    "USER dev\n"
)


def test_default_project_image_is_built_once_then_reused(project: Project) -> None:
    first = project.ensure()
    assert first.built is True
    assert re.fullmatch(rf"{re.escape(runner_repository(project.slug))}:[0-9a-f]{{16}}", first.reference)
    assert first.reference.endswith(first.content_hash[:16])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", first.image_id)
    assert first.labels[LABEL_CONTENT_HASH] == first.content_hash
    assert first.labels[LABEL_SLUG] == project.slug
    assert first.labels[LABEL_MANAGED] == "true"
    assert first.labels[LABEL_KIND] == "project"
    assert first.opencode_version == project.base.opencode_version
    assert first.labels[LABEL_OPENCODE_VERSION] == project.base.opencode_version
    assert first.env["OPENCODE_DISABLE_AUTOUPDATE"] == "true"
    assert first.env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/certs/ca-certificates.crt"
    assert len(project.docker.builds) == 1
    inspected = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}} {{.Created}} {{.Config.User}}", first.reference],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert inspected[0] == first.image_id
    assert inspected[2] == "dev"

    second = project.ensure()
    assert second.built is False
    assert (second.reference, second.image_id, second.content_hash) == (
        first.reference,
        first.image_id,
        first.content_hash,
    )
    assert second.env == first.env
    assert len(project.docker.builds) == 1, "an unchanged project must not run docker build"
    created_after = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Created}}", first.reference],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert created_after == inspected[1]


def test_project_env_and_context_changes(project: Project) -> None:
    project.write("Dockerfile", DOCKERFILE)
    project.write("tools/hello", "#!/bin/sh\necho hello\n")
    (project.folder / "tools" / "hello").chmod(0o755)
    project.write(".dockerignore", "*.log\n")
    project.write("config.yaml", "cpus: 2\n")
    first = project.ensure()
    assert first.built
    assert first.env["PROJECT_FLAVOUR"] == "mint tea"
    assert first.env["PATH"].startswith("/opt/tools:")
    output = subprocess.run(
        ["docker", "run", "--rm", first.reference, "sh", "-c", "hello; id -un; ls /opt/tools"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert output == ["hello", "dev", "hello"]

    project.write("notes.log", "ignored")
    project.write("config.yaml", "cpus: 4\n")
    assert project.ensure().built is False

    project.write("tools/hello", "#!/bin/sh\necho changed\n")
    after_context = project.ensure()
    assert after_context.built and after_context.reference != first.reference

    project.write("Dockerfile", DOCKERFILE + "RUN true\n")
    after_dockerfile = project.ensure()
    assert after_dockerfile.built
    assert after_dockerfile.reference not in (first.reference, after_context.reference)
    assert image_exists(first.reference), "older images stay until pruned"

    forced = project.ensure(rebuild=True)
    assert forced.built and forced.reference == after_dockerfile.reference
    assert "--no-cache" in project.docker.builds[-1]
    assert len(project.docker.builds) == 4


def test_user_other_than_dev_is_refused_before_building(project: Project) -> None:
    project.write("Dockerfile", "FROM opencode-sandbox/runner-base:latest\nUSER root\nRUN true\n")
    with pytest.raises(UsageError) as raised:
        project.ensure()
    assert str(project.folder / "Dockerfile") in raised.value.message
    assert project.docker.builds == []


def test_failing_step_is_named_and_previous_image_stays(project: Project) -> None:
    project.write("Dockerfile", "FROM opencode-sandbox/runner-base:latest\nRUN echo first\n")
    good = project.ensure()
    project.write(
        "Dockerfile",
        "FROM opencode-sandbox/runner-base:latest\nRUN echo first\nRUN echo boom-marker >&2 && exit 3\n",
    )
    with pytest.raises(BuildFailed) as raised:
        project.ensure()
    failure = raised.value
    assert "RUN echo boom-marker >&2 && exit 3" in failure.message
    assert failure.step is not None and "boom-marker" in failure.step
    assert any("boom-marker" in line for line in failure.log_tail)
    assert "boom-marker" in (failure.hint or "")
    assert image_exists(good.reference)
    project.write("Dockerfile", "FROM opencode-sandbox/runner-base:latest\nRUN echo first\n")
    again = project.ensure()
    assert (again.built, again.image_id) == (False, good.image_id)


def test_plan_says_what_would_be_built_without_building(project: Project) -> None:
    def plan() -> list[tuple[str, BuildAction, str]]:
        result = plan_project_image(
            project_dir=project.root,
            slug=project.slug,
            dind=False,
            opencode_version=project.base.opencode_version,
            trust_host_ca=True,
            engine=project.engine,
        )
        return [(image.reference, image.action, image.reason) for image in result.images]

    before = plan()
    assert [action for _, action, _ in before] == [BuildAction.SKIP, BuildAction.BUILD]
    assert "does not exist" in before[1][2]
    assert project.docker.builds == []
    built = project.ensure()
    assert before[1][0] == built.reference
    assert [action for _, action, _ in plan()] == [BuildAction.SKIP, BuildAction.SKIP]
    project.write("Dockerfile", "FROM opencode-sandbox/runner-base:latest\nRUN true\n")
    changed = plan()
    assert changed[1][1] is BuildAction.BUILD and changed[1][0] != built.reference
    assert len(project.docker.builds) == 1


def test_ca_certificates_and_opencode_version_rebuild_the_images(project: Project, tmp_path: Path) -> None:
    original = project.ensure()
    base_before = image_ids("reference=opencode-sandbox/runner-base:latest")
    variants: list[ImageBuildResult] = []
    variant_bases: set[str] = set()
    try:
        extra = real_pem(tmp_path, "corp-ca")
        with_ca = project.ensure(extra_ca_certificates=[extra])
        variants.append(with_ca)
        variant_bases |= image_ids("reference=opencode-sandbox/runner-base:latest")
        assert with_ca.built and with_ca.reference != original.reference
        listed = subprocess.run(
            ["docker", "run", "--rm", with_ca.reference, "ls", "/usr/local/share/ca-certificates/opencode-sandbox/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "extra-corp-ca-" in listed

        other_version = OTHER_OPENCODE_VERSIONS[0 if project.base.opencode_version != OTHER_OPENCODE_VERSIONS[0] else 1]
        with_version = project.ensure(opencode_version=other_version)
        variants.append(with_version)
        variant_bases |= image_ids("reference=opencode-sandbox/runner-base:latest")
        assert with_version.built
        assert with_version.reference not in (original.reference, with_ca.reference)
        assert with_version.opencode_version == other_version
        reported = subprocess.run(
            ["docker", "run", "--rm", with_version.reference, "opencode", "--version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert reported == other_version
    finally:
        restored = project.ensure()
        remove_images({variant.image_id for variant in variants})
        remove_images(variant_bases - base_before)
    assert (restored.reference, restored.image_id) == (original.reference, original.image_id)
    assert image_ids("reference=opencode-sandbox/runner-base:latest") == base_before


def test_engine_down_is_runtime_unavailable(tmp_path: Path) -> None:
    import os

    engine = DockerImageEngine(DockerCli(env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/absent.sock"}))
    with pytest.raises(RuntimeUnavailable) as raised:
        engine.inspect_images(["opencode-sandbox/runner-base:latest"])
    assert "doctor" in (raised.value.hint or "")


def test_unpullable_base_image_is_named(project: Project) -> None:
    missing = "127.0.0.1:9/opencode-sandbox-test/absent:latest"
    project.write("Dockerfile", f"FROM {missing}\nUSER dev\n")
    with pytest.raises(SandboxError) as raised:
        project.ensure()
    assert missing in raised.value.message
    assert project.docker.builds == []


def test_image_list_shows_our_images(project: Project) -> None:
    built = project.ensure()
    images = {image.reference: image for image in DockerRuntime().list_images()}
    assert built.reference in images
    assert "opencode-sandbox/runner-base:latest" in images
    assert all(reference.startswith("opencode-sandbox/runner-") for reference in images)
    ours = images[built.reference]
    assert ours.digest == built.image_id
    assert re.fullmatch(r"sha256:[0-9a-f]{12}", short_digest(ours.digest))
    assert ours.size_bytes and re.fullmatch(r"\d+\.\d (MiB|GiB)", format_size(ours.size_bytes))
    assert ours.created_at is not None


def test_dind_default_builds_on_the_dind_base(project: Project, runner_base_dind_image: RunnerBase) -> None:
    built = project.ensure(dind=True)
    assert built.labels["org.opencode-sandbox.dind"] == "true"
    output = subprocess.run(
        ["docker", "run", "--rm", built.reference, "sh", "-c", "id -Gn; command -v dockerd; command -v docker"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "docker" in output.split("\n")[0].split()
    assert "/usr/sbin/dockerd" in output and "/usr/bin/docker" in output


def test_a_terminal_agent_is_a_layer_on_the_project_image_planned_and_built(project: Project) -> None:
    from opencode_sandbox.core.agents import profile_of
    from opencode_sandbox.core.naming import LABEL_AGENT, LABEL_AGENT_VERSION
    from tests.fixtures.agents import CODEX_VERSION

    codex = profile_of("codex")

    def plan() -> list[tuple[str, BuildAction, str]]:
        result = plan_project_image(project_dir=project.root, slug=project.slug, dind=False,
                                    opencode_version=project.base.opencode_version, trust_host_ca=True,
                                    engine=project.engine, agent=codex, agent_version=CODEX_VERSION)
        return [(image.reference, image.action, image.reason) for image in result.images]

    before = plan()  # the base image as an earlier test of the session left it: built, or to be built again
    assert [action for _, action, _ in before][1:] == [BuildAction.BUILD, BuildAction.BUILD]
    # The project has no Dockerfile of its own: the layer goes on the base image.
    assert before[2][2] == ("its base image is built first" if before[0][1] is BuildAction.BUILD
                            else "the image does not exist yet")
    built = project.ensure(agent=codex, agent_version=CODEX_VERSION)
    after = plan()
    assert [action for _, action, _ in after] == [BuildAction.SKIP, BuildAction.SKIP, BuildAction.SKIP]
    assert after[2][0] == built.reference != after[1][0], "the agent's layer is an image of its own"
    assert (built.labels[LABEL_AGENT], built.labels[LABEL_AGENT_VERSION]) == ("codex", CODEX_VERSION)
    inside = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "sh", built.reference, "-c",
         "id -un; codex --version; test -x /usr/local/bin/opencode-sandbox-agent-event && echo event-program; "
         "cat /etc/codex/requirements.toml"],
        capture_output=True, text=True, timeout=120, check=False)
    assert inside.returncode == 0, inside.stderr
    lines = inside.stdout.splitlines()
    assert lines[0] == "dev" and CODEX_VERSION in lines[1] and lines[2] == "event-program", inside.stdout
    assert 'command = "/usr/local/bin/opencode-sandbox-agent-event busy"' in inside.stdout
    again = project.ensure(agent=codex, agent_version=CODEX_VERSION)
    assert not again.built and again.reference == built.reference


def _layers(reference: str) -> list[str]:
    shown = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", reference],
                           capture_output=True, text=True, check=True).stdout
    return list(json.loads(shown))


def _stamp(reference: str) -> str:
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", reference, "/usr/local/share/mine-stamp"],
                          capture_output=True, text=True, timeout=120, check=True).stdout


def test_projects_without_a_dockerfile_of_their_own_install_an_agent_once(
    project: Project, tmp_path: Path, unique: str, runner_base_image: RunnerBase,
) -> None:
    """A second project with the same agent takes the first one's install from the build cache; a
    project with a Dockerfile of its own gets the agent on its own image."""
    from opencode_sandbox.core.agents import PROFILES
    from opencode_sandbox.core.agents.custom import parse_agents

    script = ("printf '#!/bin/sh\\necho mine\\n' > /usr/local/bin/mine\nchmod 0755 /usr/local/bin/mine\n"
              "date +%s%N > /usr/local/share/mine-stamp\n")
    [mine] = parse_agents({"mine": {"install": script, "command": "mine"}}, PROFILES)
    first = project.ensure(agent=mine, agent_version="")
    (tmp_path / "other").mkdir()
    other = Project(tmp_path / "other", f"imgtest-{(unique[::-1] + '1' * 14)[:14]}", runner_base_image)
    try:
        second = other.ensure(agent=mine, agent_version="")
        assert second.built and second.labels[LABEL_SLUG] == other.slug != project.slug
        assert second.reference != first.reference
        assert _stamp(second.reference) == _stamp(first.reference), "the install ran once"
        assert _layers(second.reference) == _layers(first.reference)

        other.write("Dockerfile", "FROM opencode-sandbox/runner-base:latest\nRUN echo own > /tmp/own\n")
        own = other.ensure(agent=mine, agent_version="")
        own_project = other.ensure()
        assert _layers(own.reference)[:len(_layers(own_project.reference))] == _layers(own_project.reference), \
            "the agent's layer is on the project's own image"
        assert _stamp(own.reference) != _stamp(first.reference)
    finally:
        for _ in range(3):
            remove_images(image_ids(f"label={LABEL_SLUG}={other.slug}"))


def test_an_agent_of_the_users_own_is_installed_by_its_install_script(project: Project) -> None:
    """The script spans lines and runs as root at build, from a file: none of its lines is read as an
    instruction of the Dockerfile; the build fails when it leaves no command."""
    from opencode_sandbox.core.agents import PROFILES
    from opencode_sandbox.core.agents.custom import parse_agents
    from opencode_sandbox.core.naming import LABEL_AGENT

    script = ("printf '#!/bin/sh\\necho mine at work\\n' > /usr/local/bin/mine\nchmod 0755 /usr/local/bin/mine\n"
              "id -un > /usr/local/share/mine-installed-by\n")
    [mine] = parse_agents({"mine": {"install": script, "command": "mine", "environment": {"MINE_QUIET": "1"}}},
                          PROFILES)
    built = project.ensure(agent=mine, agent_version="")
    assert built.labels[LABEL_AGENT] == "mine"
    inside = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "sh", built.reference, "-c",
         "id -un; mine; cat /usr/local/share/mine-installed-by; echo $MINE_QUIET; ls /tmp | wc -l"],
        capture_output=True, text=True, timeout=120, check=False)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.splitlines() == ["dev", "mine at work", "root", "1", "0"], inside.stdout

    [broken] = parse_agents({"mine": {"install": "true", "command": "mine"}}, PROFILES)
    with pytest.raises(BuildFailed) as caught:
        project.ensure(agent=broken, agent_version="")
    assert any("the install gave no" in line for line in caught.value.log_tail), caught.value.log_tail
