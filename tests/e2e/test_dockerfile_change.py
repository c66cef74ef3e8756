"""A Dockerfile change on either runtime, in one scenario: the VM is recreated from the new image
and the user's answer decides the home volume: keep it, reset it from the image, or migrate
its files into a fresh one from the image."""

from __future__ import annotations

import pytest

from opencode_sandbox.state.store import StateStore
from tests.e2e.harness import Project, Tmux, cli_command

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.timeout(5400)]

FROM_BASE = "FROM opencode-sandbox/runner-base:latest\n"
LOADED = 1800
"""Seconds until the question shows: the new image is built and, on microsandbox, loaded into msb
first, which took more than 15 minutes once in the emulated lab with two guests running."""
REPORT = ("(cat ~/mine 2>/dev/null || echo no-mine; cat ~/from-image 2>/dev/null || echo no-image-file;"
          " test -e ~/{new} && echo has-{new} || echo no-{new}) > /workspace/answer.txt")


def recorded_home(project: Project) -> str | None:
    return StateStore(project.state_dir.parent).load(project.slug).home_volume


def answer_the_change(project: Project, terminal_name: str, answer: str, image_text: str) -> list[str]:
    """Change the Dockerfile with no VM running (while one runs, the watch puts a change of the
    tool's folder back), run `shell` on a terminal, answer its question; what the VM's home shows."""
    stopped = project.cli("stop")
    assert stopped.returncode == 0, stopped.stderr
    project.write_dockerfile(FROM_BASE + f"RUN echo {image_text} > /home/dev/from-image"
                                         f" && touch /home/dev/{image_text}\n")
    report = REPORT.format(new=image_text)
    terminal = Tmux(terminal_name, cli_command("shell", "--", "sh", "-c", report), project.root, project.env)
    try:
        terminal.wait_for(r"\(keep, reset, migrate\) \[keep\]", timeout=LOADED)
        terminal.send(answer, "Enter")
        terminal.wait_for(r"EXIT-CODE=0", timeout=900)
    finally:
        terminal.close()
    return (project.root / "answer.txt").read_text().splitlines()


def test_dockerfile_changes_recreate_the_vm_with_keep_reset_and_migrate(runtime_project: Project,
                                                                         unique: str) -> None:
    project = runtime_project
    assert project.shell("echo mine > ~/mine").returncode == 0
    [first] = project.home_volumes()
    vm = project.vm_created()

    assert answer_the_change(project, f"osb-keep-{unique}", "keep", "image-1") == ["mine", "no-image-file",
                                                                                        "no-image-1"]
    assert project.vm_created() != vm
    assert project.home_volumes() == [first]
    assert recorded_home(project) == first
    vm = project.vm_created()

    assert answer_the_change(project, f"osb-reset-{unique}", "reset", "image-2") == ["no-mine", "image-2",
                                                                                          "has-image-2"]
    assert project.vm_created() != vm
    [reset] = set(project.home_volumes()) - {first}
    assert recorded_home(project) == reset
    assert project.shell("echo mine-after-reset > ~/mine").returncode == 0
    vm = project.vm_created()

    # the old home's files go on top of the new image's: its from-image too
    assert answer_the_change(project, f"osb-migrate-{unique}", "migrate", "image-3") == [
        "mine-after-reset", "image-2", "has-image-3"]
    assert project.vm_created() != vm
    [migrated] = set(project.home_volumes()) - {first, reset}
    assert recorded_home(project) == migrated
    owners = project.shell("id -un && stat -c %U ~ ~/mine ~/from-image && echo more >> ~/mine")
    assert owners.returncode == 0, owners.stderr
    dev, *files = owners.stdout.split()
    assert files == [dev] * 3, "dev owns its migrated home"
