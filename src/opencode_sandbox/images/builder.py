"""Building the runner images through the image engine, skipping builds that change nothing.

Every image carries the content hash of what shaped it as a label; an image whose label
matches the hash of the current inputs is used as it is and `docker build` is not run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.agents import AgentProfile, SessionKind
from opencode_sandbox.core.naming import (
    BASE_IMAGE,
    BASE_IMAGE_DIND,
    LABEL_CONTENT_HASH,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OPENCODE_VERSION,
    LABEL_SLUG,
    runner_image,
)
from opencode_sandbox.core.records import Record
from opencode_sandbox.errors import SandboxError
from opencode_sandbox.images.agent_layer import agent_dockerfile
from opencode_sandbox.images.certificates import CaCertificate, collect_ca_certificates
from opencode_sandbox.images.compose import (
    DIND_START_SCRIPT,
    base_dockerfile,
    default_dockerfile,
    effective_dockerfile,
    packaged_file,
)
from opencode_sandbox.images.context import ContextFile, context_files, write_build_context
from opencode_sandbox.images.dockerfile import external_bases, parse_stages
from opencode_sandbox.images.hashing import content_hash, short_hash
from opencode_sandbox.images.image_document import env_of, labels_of
from opencode_sandbox.images.progress import BuildProgress, SilentProgress

if TYPE_CHECKING:
    from opencode_sandbox.engine.base import ImageEngine

LOG_TAIL_LINES = 15


class ImageKind(StrEnum):
    BASE = "base"
    PROJECT = "project"
    AGENT = "agent"
    """A terminal agent's layer on top of the project image (`agent_layer.py`)."""


class BuildAction(StrEnum):
    BUILD = "build"
    SKIP = "skip"


class ImageBuildResult(Record):
    reference: str
    image_id: str
    """Docker's image ID, `sha256:<64 hex>`."""
    content_hash: str
    env: Mapping[str, str]
    """The image's ENV, to apply to the running sandbox."""
    opencode_version: str | None
    built: bool
    """False when the existing image was up to date and no build ran."""
    labels: Mapping[str, str] = {}


class PlannedImage(Record):
    reference: str
    action: BuildAction
    reason: str
    content_hash: str | None
    """None when it depends on a base image that is itself still to be built."""


class BuildPlan(Record):
    images: tuple[PlannedImage, ...]

    @property
    def builds_anything(self) -> bool:
        return any(image.action is BuildAction.BUILD for image in self.images)


class BuildFailed(SandboxError):
    """A `docker build` that failed; the image it would have replaced is left as it was."""

    def __init__(self, reference: str, step: str | None, exit_code: int, log: Sequence[str]) -> None:
        self.reference = reference
        self.step = step
        self.log_tail = [line for line in log if line.strip()][-LOG_TAIL_LINES:]
        shown = step if step is None or len(step) <= 90 else step[:87] + "..."
        where = f" at {shown}" if shown else ""
        tail = "\n".join("  " + line for line in self.log_tail)
        super().__init__(
            f"building {reference} failed{where} (exit code {exit_code})",
            hint=f"Last build output:\n{tail}\n"
            "Fix the step and run `opencode-sandbox build` again;"
            " the previous image stays in use until a build succeeds.",
        )


class _Job(Record):
    kind: ImageKind
    dockerfile: str
    context: tuple[ContextFile, ...]
    certificates: tuple[CaCertificate, ...]
    opencode_version: str | None
    slug: str | None = None
    fixed_reference: str | None = None
    packaged: Mapping[str, str] = {}
    build_args: Mapping[str, str] = {}

    def reference(self, full_hash: str) -> str:
        if self.fixed_reference is not None:
            return self.fixed_reference
        assert self.slug is not None
        return runner_image(self.slug, short_hash(full_hash))

    def labels(self, full_hash: str) -> dict[str, str]:
        labels = {LABEL_MANAGED: "true", LABEL_CONTENT_HASH: full_hash, LABEL_KIND: self.kind.value}
        if self.slug is not None:
            labels[LABEL_SLUG] = self.slug
        return labels


class _Evaluation(Record):
    reference: str
    content_hash: str
    existing: Mapping[str, Any] | None
    action: BuildAction
    reason: str


def decide(existing_labels: Mapping[str, str] | None, full_hash: str, rebuild: bool) -> tuple[BuildAction, str]:
    """Whether an image must be built, and why, from the labels of the image present now."""
    if rebuild:
        return BuildAction.BUILD, "a rebuild was requested"
    if existing_labels is None:
        return BuildAction.BUILD, "the image does not exist yet"
    recorded = existing_labels.get(LABEL_CONTENT_HASH)
    if recorded is None:
        return BuildAction.BUILD, "the existing image has no content hash"
    if recorded != full_hash:
        return (
            BuildAction.BUILD,
            "its Dockerfile, build context, base image, opencode version or CA certificates changed",
        )
    return BuildAction.SKIP, "up to date"


def _result(evaluation: _Evaluation, document: Mapping[str, Any], built: bool) -> ImageBuildResult:
    labels = labels_of(document) or {}
    return ImageBuildResult(
        reference=evaluation.reference,
        image_id=str(document["Id"]),
        content_hash=evaluation.content_hash,
        env=env_of(document),
        opencode_version=labels.get(LABEL_OPENCODE_VERSION) or None,
        built=built,
        labels=labels,
    )


def _base_job(dind: bool, opencode_version: str, certificates: Sequence[CaCertificate]) -> _Job:
    return _Job(
        kind=ImageKind.BASE,
        dockerfile=base_dockerfile(dind),
        context=(),
        certificates=tuple(certificates),
        opencode_version=opencode_version,
        fixed_reference=BASE_IMAGE_DIND if dind else BASE_IMAGE,
        packaged={DIND_START_SCRIPT: packaged_file(DIND_START_SCRIPT)} if dind else {},
        build_args={} if dind else {"OPENCODE_VERSION": opencode_version},
    )


def _agent_job(parent: str, opencode_version: str | None, slug: str, agent: AgentProfile, version: str,
               certificates: Sequence[CaCertificate]) -> _Job:
    dockerfile, packaged = agent_dockerfile(parent, agent, version)
    return _Job(
        kind=ImageKind.AGENT,
        dockerfile=dockerfile,
        context=(),
        certificates=tuple(certificates),
        opencode_version=opencode_version,
        slug=slug,
        packaged=packaged,
    )


def _agent_parent(project_job: _Job, project_reference: str) -> str:
    """The image the agent's layer goes on. A project without a Dockerfile of its own has the base
    image with labels for its image, so its layer goes on the base image itself: the build cache
    then serves every such project with the same agent, and the agent is installed once."""
    if project_job.dockerfile in (default_dockerfile(False), default_dockerfile(True)):
        return _our_bases(project_job.dockerfile)[0]
    return project_reference


class ImageBuilder:
    """Ensures images exist and are current; one per command, reusing what it inspected."""

    def __init__(
        self,
        engine: ImageEngine | None = None,
        progress: BuildProgress | None = None,
        verbose: bool = False,
    ) -> None:
        if engine is None:
            from opencode_sandbox.engine.docker import DockerImageEngine

            engine = DockerImageEngine()
        self.engine = engine
        self.progress: BuildProgress = progress or SilentProgress()
        self.verbose = verbose
        self._ids: dict[str, str] = {}

    # facts -----------------------------------------------------------------------------
    def _base_ids(
        self, bases: Sequence[str], also: Sequence[str] = (), pull: bool = True
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        wanted = [reference for reference in bases if reference not in self._ids]
        documents = self.engine.inspect_images([*wanted, *also])
        for reference in wanted:
            if reference in documents:
                self._ids[reference] = str(documents[reference]["Id"])
            elif pull and reference not in (BASE_IMAGE, BASE_IMAGE_DIND):
                self.progress.note(f"Pulling {reference}")
                self.engine.pull(reference)
                pulled = self.engine.inspect_images([reference])
                if reference not in pulled:
                    raise SandboxError(
                        f"the base image {reference} is not available after pulling it",
                        hint=f"Check the image name in the Dockerfile's FROM line ({reference}).",
                    )
                self._ids[reference] = str(pulled[reference]["Id"])
        ids = {reference: self._ids[reference] for reference in bases if reference in self._ids}
        return ids, documents

    def _evaluate(self, job: _Job, rebuild: bool, pull: bool = True) -> _Evaluation | None:
        """None when a base image of the job is missing (it will be built first)."""
        bases = external_bases(parse_stages(job.dockerfile))
        also = [job.fixed_reference] if job.fixed_reference else []
        ids, documents = self._base_ids(bases, also, pull=pull)
        if any(base not in ids for base in bases):
            return None
        full_hash = content_hash(
            dockerfile=job.dockerfile,
            context=job.context,
            base_image_ids=ids,
            opencode_version=job.opencode_version,
            ca_certificates=job.certificates,
            packaged=job.packaged,
        )
        reference = job.reference(full_hash)
        if reference not in also:
            documents = self.engine.inspect_images([reference])
        existing = documents.get(reference)
        action, reason = decide(labels_of(existing), full_hash, rebuild)
        return _Evaluation(reference, full_hash, existing, action, reason)

    # doing -----------------------------------------------------------------------------
    def _ensure(self, job: _Job, rebuild: bool) -> ImageBuildResult:
        evaluation = self._evaluate(job, rebuild)
        if evaluation is None:
            missing = [b for b in external_bases(parse_stages(job.dockerfile)) if b not in self._ids]
            raise SandboxError(
                f"the base image {missing[0]} is missing",
                hint="Run `opencode-sandbox build` to build the base images.",
            )
        if evaluation.action is BuildAction.SKIP and evaluation.existing is not None:
            self._ids[evaluation.reference] = str(evaluation.existing["Id"])
            return _result(evaluation, evaluation.existing, built=False)
        image_id = self._build(job, evaluation, no_cache=rebuild)
        document = self.engine.inspect_images([image_id]).get(image_id)
        if document is None:
            raise SandboxError(
                f"the image just built for {evaluation.reference} cannot be found",
                hint="Run the build again; `opencode-sandbox doctor` checks the Docker setup.",
            )
        self._ids[evaluation.reference] = image_id
        return _result(evaluation, document, built=True)

    def _build(self, job: _Job, evaluation: _Evaluation, no_cache: bool) -> str:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="opencode-sandbox-build-") as temporary:
            context_dir = Path(temporary) / "context"
            context_dir.mkdir()
            write_build_context(context_dir, job.dockerfile, job.context, job.certificates, dict(job.packaged))
            log: list[str] = []
            step: list[str] = []

            def on_line(text: str) -> None:
                log.append(text)
                current = _step_of(text)
                if current:
                    step[:] = [current]
                self.progress.line(text)

            self.progress.start(f"Building {evaluation.reference} ({evaluation.reason})")
            outcome = self.engine.build(
                context_dir,
                tag=evaluation.reference,
                labels=job.labels(evaluation.content_hash),
                build_args=job.build_args,
                no_cache=no_cache,
                on_line=on_line,
            )
            self.progress.finish(outcome.image_id is not None, log)
            if outcome.image_id is None:
                raise BuildFailed(evaluation.reference, step[0] if step else None, outcome.exit_code, log)
            return outcome.image_id

    # public ----------------------------------------------------------------------------
    def ensure_base_image(
        self,
        *,
        dind: bool,
        opencode_version: str,
        certificates: Sequence[CaCertificate],
        rebuild: bool = False,
    ) -> ImageBuildResult:
        result = self._ensure(_base_job(False, opencode_version, certificates), rebuild)
        if dind:
            result = self._ensure(_base_job(True, opencode_version, certificates), rebuild)
        return result

    def ensure_project_image(
        self,
        *,
        project_dir: Path,
        slug: str,
        dind: bool,
        opencode_version: str,
        certificates: Sequence[CaCertificate],
        rebuild: bool = False,
        rebuild_base: bool = False,
        agent: AgentProfile | None = None,
        agent_version: str | None = None,
    ) -> ImageBuildResult:
        """The project's image; for a terminal agent, with the agent's layer on top."""
        job = _project_job(project_dir, slug, dind, opencode_version, certificates)
        needs = _our_bases(job.dockerfile)
        if needs:
            self.ensure_base_image(
                dind=BASE_IMAGE_DIND in needs,
                opencode_version=opencode_version,
                certificates=certificates,
                rebuild=rebuild_base,
            )
        project = self._ensure(job, rebuild)
        if agent is None or agent.session is SessionKind.SERVER:
            return project
        assert agent_version is not None
        parent = _agent_parent(job, project.reference)
        return self._ensure(_agent_job(parent, project.opencode_version, slug, agent, agent_version, certificates),
                            rebuild)

    def plan_project_image(
        self,
        *,
        project_dir: Path,
        slug: str,
        dind: bool,
        opencode_version: str,
        certificates: Sequence[CaCertificate],
        rebuild: bool = False,
        rebuild_base: bool = False,
        agent: AgentProfile | None = None,
        agent_version: str | None = None,
    ) -> BuildPlan:
        job = _project_job(project_dir, slug, dind, opencode_version, certificates)
        needs = _our_bases(job.dockerfile)
        planned: list[PlannedImage] = []
        jobs = [_base_job(False, opencode_version, certificates)] if needs else []
        if BASE_IMAGE_DIND in needs:
            jobs.append(_base_job(True, opencode_version, certificates))
        base_changes = False
        for base_job in jobs:
            assert base_job.fixed_reference is not None
            evaluation = None if base_changes else self._evaluate(base_job, rebuild_base, pull=False)
            if evaluation is None:
                planned.append(
                    PlannedImage(base_job.fixed_reference, BuildAction.BUILD, _after_base(base_changes), None)
                )
                base_changes = True
                continue
            planned.append(
                PlannedImage(
                    evaluation.reference,
                    evaluation.action,
                    evaluation.reason,
                    evaluation.content_hash,
                )
            )
            base_changes = base_changes or evaluation.action is BuildAction.BUILD
        evaluation = None if base_changes else self._evaluate(job, rebuild, pull=False)
        if evaluation is None:
            planned.append(
                PlannedImage(f"{job.reference('?' * 16)}", BuildAction.BUILD, _after_base(base_changes), None)
            )
        else:
            planned.append(
                PlannedImage(
                    evaluation.reference,
                    evaluation.action,
                    evaluation.reason,
                    evaluation.content_hash,
                )
            )
        if agent is not None and agent.session is SessionKind.TERMINAL:
            reference = _agent_parent(job, planned[-1].reference)
            parent = next(image for image in planned if image.reference == reference)
            planned.append(self._plan_agent_layer(parent, slug, agent, agent_version or "latest", certificates,
                                                  rebuild, opencode_version))
        return BuildPlan(tuple(planned))

    def _plan_agent_layer(self, parent: PlannedImage, slug: str, agent: AgentProfile, version: str,
                          certificates: Sequence[CaCertificate], rebuild: bool,
                          opencode_version: str) -> PlannedImage:
        """The agent's layer as planned: built when the image it goes on is."""
        if parent.action is BuildAction.BUILD:
            return PlannedImage(runner_image(slug, "?" * 16), BuildAction.BUILD, "its base image is built first", None)
        job = _agent_job(parent.reference, opencode_version, slug, agent, version, certificates)
        evaluation = self._evaluate(job, rebuild, pull=False)
        if evaluation is None:
            return PlannedImage(runner_image(slug, "?" * 16), BuildAction.BUILD, "its base image is missing", None)
        return PlannedImage(evaluation.reference, evaluation.action, evaluation.reason, evaluation.content_hash)


def _after_base(base_changes: bool) -> str:
    return "its base image is built first" if base_changes else "its base image is missing"


def _our_bases(dockerfile: str) -> list[str]:
    return [base for base in external_bases(parse_stages(dockerfile)) if base in (BASE_IMAGE, BASE_IMAGE_DIND)]


def _project_job(
    project_dir: Path,
    slug: str,
    dind: bool,
    opencode_version: str,
    certificates: Sequence[CaCertificate],
) -> _Job:
    effective = effective_dockerfile(project_dir, dind)
    return _Job(
        kind=ImageKind.PROJECT,
        dockerfile=effective.text,
        context=tuple(context_files(effective.context_dir)),
        certificates=tuple(certificates),
        opencode_version=opencode_version,
        slug=slug,
    )


def _step_of(line: str) -> str | None:
    """The build step a log line announces (classic builder or BuildKit plain output)."""
    if line.startswith("Step ") and " : " in line:
        return line.split(" : ", 1)[0].replace("Step ", "step ") + ": " + line.split(" : ", 1)[1]
    if line.startswith("#") and "] " in line and "[internal]" not in line:
        bracket = line.index("[")
        return line[bracket:].strip()
    return None


# Plain-argument entry points ---------------------------------------------------------------


def _builder(progress: BuildProgress | None, verbose: bool, engine: ImageEngine | None) -> ImageBuilder:
    return ImageBuilder(engine=engine, progress=progress or SilentProgress(), verbose=verbose)


def ensure_base_image(
    *,
    dind: bool,
    opencode_version: str,
    trust_host_ca: bool,
    extra_ca_certificates: Sequence[Path] = (),
    rebuild: bool = False,
    verbose: bool = False,
    progress: BuildProgress | None = None,
    engine: ImageEngine | None = None,
) -> ImageBuildResult:
    """Build `opencode-sandbox/runner-base[-dind]:latest` unless it is up to date."""
    certificates = collect_ca_certificates(trust_host_ca, extra_ca_certificates)
    return _builder(progress, verbose, engine).ensure_base_image(
        dind=dind, opencode_version=opencode_version, certificates=certificates, rebuild=rebuild
    )


def ensure_project_image(
    *,
    project_dir: Path,
    slug: str,
    dind: bool,
    opencode_version: str,
    trust_host_ca: bool,
    extra_ca_certificates: Sequence[Path] = (),
    rebuild: bool = False,
    rebuild_base: bool = False,
    verbose: bool = False,
    progress: BuildProgress | None = None,
    engine: ImageEngine | None = None,
    agent: AgentProfile | None = None,
    agent_version: str | None = None,
) -> ImageBuildResult:
    """The project's runner image `opencode-sandbox/runner-<slug>:<hash>`, built if needed; for a
    terminal agent (`agent`, at `agent_version`), the agent's layer on top of it.

    The base images it starts from are ensured first. `rebuild` forces a clean
    (`--no-cache`) build of the project image, `rebuild_base` of the base images too.
    """
    certificates = collect_ca_certificates(trust_host_ca, extra_ca_certificates)
    return _builder(progress, verbose, engine).ensure_project_image(
        project_dir=project_dir,
        slug=slug,
        dind=dind,
        opencode_version=opencode_version,
        certificates=certificates,
        rebuild=rebuild,
        rebuild_base=rebuild_base,
        agent=agent,
        agent_version=agent_version,
    )


def plan_project_image(
    *,
    project_dir: Path,
    slug: str,
    dind: bool,
    opencode_version: str,
    trust_host_ca: bool,
    extra_ca_certificates: Sequence[Path] = (),
    rebuild: bool = False,
    rebuild_base: bool = False,
    engine: ImageEngine | None = None,
    agent: AgentProfile | None = None,
    agent_version: str | None = None,
) -> BuildPlan:
    """What `ensure_project_image` would build and why, without building or pulling."""
    certificates = collect_ca_certificates(trust_host_ca, extra_ca_certificates)
    return ImageBuilder(engine=engine).plan_project_image(
        project_dir=project_dir,
        slug=slug,
        dind=dind,
        opencode_version=opencode_version,
        certificates=certificates,
        rebuild=rebuild,
        rebuild_base=rebuild_base,
        agent=agent,
        agent_version=agent_version,
    )


def effective_dockerfile_text(project_dir: Path, dind: bool) -> str:
    """What `build dockerfile` prints: the Dockerfile the project image is built from."""
    return effective_dockerfile(project_dir, dind).text
