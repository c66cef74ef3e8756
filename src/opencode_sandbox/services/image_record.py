"""The record of the last full image check, so a start whose inputs did not change skips it.

The full check reads the project's Dockerfile and build context and the CA certificates,
hashes them with the base images' IDs, and compares the hash with the images' labels. The
record keeps a signature of those inputs as the file system describes them (path, type,
size, modification time and inode of every file, the targets of links), the settings and
versions that shape the image, and the base images' current IDs, next to the image the
check ended with. A start recomputes the signature (a few `stat` calls and two image
inspections), and uses the recorded image when nothing differs and the engine still has
that very image. Anything else, or a `--rebuild`, runs the full check again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from opencode_sandbox import TYPE_CHECKING, __version__, images
from opencode_sandbox.config.settings import Settings
from opencode_sandbox.core.digest import sha256
from opencode_sandbox.core.naming import BASE_IMAGE, BASE_IMAGES, LABEL_OPENCODE_VERSION
from opencode_sandbox.core.records import Record
from opencode_sandbox.images.certificates import HOST_CA_DIR
from opencode_sandbox.images.image_document import env_of, labels_of
from opencode_sandbox.project import Project
from opencode_sandbox.state.files import UnreadableState, read_yaml_mapping, write_yaml
from opencode_sandbox.state_layout import ProjectLayout

if TYPE_CHECKING:
    from opencode_sandbox.engine.base import ImageEngine

PACKAGED_DIR = Path(images.__file__).parent / "dockerfiles"


class CheckedImage(Record):
    reference: str
    image_id: str
    env: dict[str, str]
    opencode_version: str | None
    labels: dict[str, str]
    built: bool = False


def _tree(folder: Path) -> list[object]:
    """Every entry under `folder` as the file system describes it, without reading files."""
    entries: list[object] = []
    try:
        top = folder.lstat()
    except OSError:
        return ["absent"]
    entries.append([".", *_described(folder, top)])
    for directory, subdirectories, files in os.walk(folder):
        subdirectories.sort()
        for name in sorted(files) + subdirectories:
            path = Path(directory) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            entries.append([path.relative_to(folder).as_posix(), *_described(path, info)])
    return entries


def _described(path: Path, info: os.stat_result) -> list[object]:
    described: list[object] = [info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino]
    if os.path.islink(path):
        # A linked Dockerfile or certificate is read through the link: its target counts too.
        described.append(os.readlink(path))
        try:
            target = path.stat()
            described += [target.st_mode, target.st_size, target.st_mtime_ns, target.st_ino]
        except OSError:
            described.append("dangling")
    return described


def _file(path: Path) -> list[object]:
    try:
        return [str(path), *_described(path, path.lstat())]
    except OSError:
        return [str(path), "absent"]


def _base_image_ids(engine: ImageEngine, dind: bool) -> list[str | None]:
    """The IDs of the base images the project's image can be built on: the plain one, and with
    `dind` also the one with Docker inside (built on the plain one)."""
    references = BASE_IMAGES if dind else (BASE_IMAGE,)
    documents = engine.inspect_images(references)
    return [str(documents[reference].get("Id")) if reference in documents else None for reference in references]


def signature_inputs(engine: ImageEngine, project: Project, settings: Settings,
                     opencode_version: str) -> dict[str, object]:
    """Everything that could change the result of the full image check, each by its name."""
    return {
        "tool version": __version__,
        "project": project.slug,
        "checkout": str(project.root),
        "opencode version": opencode_version,
        "dind": settings.dind,
        "trust host CA": settings.trust_host_ca,
        "packaged Dockerfiles": _tree(PACKAGED_DIR),
        "project configuration folder": _tree(project.config_dir),
        "host CA folder": _tree(HOST_CA_DIR) if settings.trust_host_ca else None,
        "extra CA certificates": [_file(path.expanduser()) for path in settings.extra_ca_certificates],
        "base images": _base_image_ids(engine, settings.dind),
    }


def inputs_signature(engine: ImageEngine, project: Project, settings: Settings, opencode_version: str) -> str:
    """The digest of `signature_inputs`."""
    parts = list(signature_inputs(engine, project, settings, opencode_version).values())
    return sha256(json.dumps(parts, default=str).encode()).hexdigest()


def recorded_reference(project_state_dir: Path) -> str | None:
    """The image the last full check recorded, whatever its signature."""
    try:
        record = read_yaml_mapping(ProjectLayout(project_state_dir).image_check) or {}
    except UnreadableState:
        return None
    reference = record.get("reference")
    return reference if isinstance(reference, str) else None


def recall(engine: ImageEngine, project_state_dir: Path, signature: str) -> CheckedImage | None:
    """The recorded image when the signature matches and the engine still has that very image."""
    try:
        record = read_yaml_mapping(ProjectLayout(project_state_dir).image_check) or {}
    except UnreadableState:
        return None
    reference, image_id = record.get("reference"), record.get("image_id")
    if record.get("signature") != signature or not isinstance(reference, str) or not isinstance(image_id, str):
        return None
    document = engine.inspect_image(reference)
    if document is None or document.get("Id") != image_id:
        return None
    labels = labels_of(document) or {}
    return CheckedImage(reference, image_id, env_of(document), labels.get(LABEL_OPENCODE_VERSION) or None, labels)


def remember(project_state_dir: Path, signature: str, image: CheckedImage) -> None:
    write_yaml(ProjectLayout(project_state_dir).image_check,
               {"signature": signature, "reference": image.reference, "image_id": image.image_id})
