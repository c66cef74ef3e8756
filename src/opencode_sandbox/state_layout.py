"""Every file and folder this tool keeps in its state folder (`$XDG_STATE_HOME/opencode-sandbox`),
and what each holds. No other module names them: each asks `StateLayout` or `ProjectLayout` for a
path. docs/design.md shows them as a table generated from `TOOL_PLACES` and `PROJECT_PLACES`
(`table()`)."""

from __future__ import annotations

import os
from pathlib import Path

from opencode_sandbox.core.records import Record


class Place(Record):
    name: str
    """Relative to the state folder, or to a project's folder in it."""
    kind: str
    """`file`, `folder` or `lock` (a file held with `flock`, its content empty)."""
    holds: str


FILE, FOLDER, LOCK = "file", "folder", "lock"

AUTO_PRUNE_STAMP = Place("auto-prune.last", FILE, "its time is when auto-prune last ran (at most once an hour)")
UPDATE_ATTEMPT = Place("update-check.attempt", FILE, "its time is when the release check was last tried")
UPDATER = Place("updater.yaml", FILE, "the release check's answer and the opencode version images are built with")
FIRST_BOOT_LOCKS = Place("vm-ensure", FOLDER, "`<project>.lock` for each project: one start at a time sets up its VM")
POLICY_MARKS = Place("docker-network-policy", FOLDER, "docker: a mark for each container whose nftables rules are in "
                                                      "place, named after it")
DOCKER_SECCOMP = Place("docker-seccomp.json", FILE, "docker: the seccomp profile VM containers are created with "
                                                   "(`docker run` reads it; the engine keeps a copy per container)")
TOOL_PLACES = (AUTO_PRUNE_STAMP, UPDATE_ATTEMPT, UPDATER, FIRST_BOOT_LOCKS, POLICY_MARKS, DOCKER_SECCOMP)

PROJECT_STATE = Place("state.yaml", FILE, "the project's root, home volume, image and the configuration its server "
                                          "started with")
DAEMON_PASSWORD = Place("daemon-password", FILE, "the password of the VM's `opencode serve` (mode 0600)")
PROVISIONED = Place("provisioned.yaml", FILE, "the opencode configuration files last copied into the home volume")
IMAGE_CHECK = Place("image-check.yaml", FILE, "the image the last full check found, and the signature of its inputs")
LEASES = Place("leases", FOLDER, "a `.lease` file for each attached client, held with `flock`")
STOP_LOCK = Place("stop.lock", LOCK, "held while a lease is taken, and while the idle reaper decides and stops the VM")
REAPER_SETTINGS = Place("reaper.yaml", FILE, "what the idle reaper watches (mode 0600: it holds the daemon password)")
REAPER_LOG = Place("reaper.log", FILE, "each decision of the idle reaper")
EARLIER_REAPER_LOG = Place("reaper.log.1", FILE, "the idle reaper's log as it was when it grew past its size limit")
REAPER_LOCK = Place("reaper.lock", LOCK, "held by the one idle reaper of the project")
GUARD = Place("guard", FOLDER, "the guard on the files the host runs")
GUARD_RECORD = Place("guard/record.yaml", FILE, "each guarded file as last recorded")
GUARD_COPIES = Place("guard/copies", FOLDER, "the recorded content of the guarded files, to put back")
GUARD_LOCK = Place("guard/guard.lock", LOCK, "one review at a time")
GUARD_MOVED = Place("guard/moved.yaml", FILE, "what a review moved out of the checkout, until it is reviewed again")
GUARD_REVIEW = Place("guard-review", FOLDER, "what the guard took from the checkout, kept for the user to look at, out "
                                             "of the VM's reach: `<UTC time>/<path>`, without execute bits")
VM_GIT = Place("git", FOLDER, "the VM's own git directory, mounted at /opt/opencode-sandbox/git")
GITFILE = Place("gitfile", FILE, "the `.git` file the VM sees in its checkout, naming that directory")
GIT_SYNC_LOCK = Place("git-sync.lock", LOCK, "one git sync of the project at a time")
GIT_SYNC_STAMP = Place("git-sync.stamp", FILE, "a digest of how both git directories' refs looked before the last "
                                               "sync that left nothing pending; a sync that finds them so does nothing")
GIT_HELD = Place("git-held.yaml", FILE, "the VM's branches the host holds (they add a gitlink, a .gitmodules, "
                                         "this tool's configuration or a file the host runs), each tip with why")
INCOMING_BYTES = Place("incoming-bytes.yaml", FILE, "when the git sync took the VM's bundles in the last day, and "
                                                   "how large: past a quota a day, it takes no more")
HOST_RUN_PATHS = Place("host-run-paths.yaml", FILE, "in the isolated mode, the checkout's paths the host runs, as the "
                                                 "last start found them: a VM branch that changes one is held")
VM_GIT_STAGING = Place(".git.*", FOLDER, "the VM's git directory while it is made; renamed to `git` once complete")
INCOMING_BUNDLE = Place("incoming-*.bundle", FILE, "the VM's commits copied out of its git directory, while their "
                                                   "objects are checked")
ATTENTION = Place("attention", FILE, "the id of the last time the agent needed the user, written by the idle reaper "
                                    "where no desktop notification can be shown: an attached client rings its bell")
ATTENTION_LOCK = Place("attention.rung", FILE, "the id of the event an attached client last rang its bell for, held "
                                               "with `flock` while a client claims one: one client rings for each")
WATCH_FAILED = Place("watch-failed.yaml", FILE, "why the idle reaper stopped the VM at once when its watch could not "
                                               "do its job (it failed, fell behind or died), until a start tells it")
PROJECT_PLACES = (
    PROJECT_STATE, DAEMON_PASSWORD, PROVISIONED, IMAGE_CHECK, LEASES, STOP_LOCK, REAPER_SETTINGS, REAPER_LOG,
    EARLIER_REAPER_LOG, REAPER_LOCK, GUARD, GUARD_RECORD, GUARD_COPIES, GUARD_LOCK, GUARD_MOVED, GUARD_REVIEW, VM_GIT,
    GITFILE, GIT_SYNC_LOCK, GIT_SYNC_STAMP, GIT_HELD, INCOMING_BYTES, HOST_RUN_PATHS, VM_GIT_STAGING,
    INCOMING_BUNDLE, ATTENTION, ATTENTION_LOCK, WATCH_FAILED,
)


class ProjectLayout:
    """One project's folder, named by its slug."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __getitem__(self, place: Place) -> Path:
        assert place in PROJECT_PLACES, place
        return self.folder / place.name

    @property
    def state(self) -> Path:
        return self[PROJECT_STATE]

    @property
    def daemon_password(self) -> Path:
        return self[DAEMON_PASSWORD]

    @property
    def provisioned(self) -> Path:
        return self[PROVISIONED]

    @property
    def image_check(self) -> Path:
        return self[IMAGE_CHECK]

    @property
    def leases(self) -> Path:
        return self[LEASES]

    @property
    def stop_lock(self) -> Path:
        return self[STOP_LOCK]

    @property
    def reaper_settings(self) -> Path:
        return self[REAPER_SETTINGS]

    @property
    def reaper_log(self) -> Path:
        return self[REAPER_LOG]

    @property
    def earlier_reaper_log(self) -> Path:
        return self[EARLIER_REAPER_LOG]

    @property
    def reaper_lock(self) -> Path:
        return self[REAPER_LOCK]

    @property
    def guard(self) -> Path:
        return self[GUARD]

    @property
    def guard_review(self) -> Path:
        return self[GUARD_REVIEW]

    @property
    def vm_git(self) -> Path:
        return self[VM_GIT]

    @property
    def gitfile(self) -> Path:
        return self[GITFILE]

    @property
    def git_sync_lock(self) -> Path:
        return self[GIT_SYNC_LOCK]

    @property
    def git_sync_stamp(self) -> Path:
        return self[GIT_SYNC_STAMP]

    @property
    def git_held(self) -> Path:
        return self[GIT_HELD]

    @property
    def incoming_bytes(self) -> Path:
        return self[INCOMING_BYTES]

    @property
    def host_run_paths(self) -> Path:
        return self[HOST_RUN_PATHS]

    @property
    def attention(self) -> Path:
        return self[ATTENTION]

    @property
    def attention_lock(self) -> Path:
        return self[ATTENTION_LOCK]

    @property
    def watch_failed(self) -> Path:
        return self[WATCH_FAILED]

    def vm_git_staging(self) -> Path:
        return self.folder / VM_GIT_STAGING.name.replace("*", os.urandom(6).hex())

    def incoming_bundle(self) -> Path:
        return self.folder / INCOMING_BUNDLE.name.replace("*", os.urandom(8).hex())


class StateLayout:
    """The state folder of one host user."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __getitem__(self, place: Place) -> Path:
        assert place in TOOL_PLACES, place
        return self.root / place.name

    def project(self, slug: str) -> ProjectLayout:
        return ProjectLayout(self.root / slug)

    @property
    def auto_prune_stamp(self) -> Path:
        return self[AUTO_PRUNE_STAMP]

    @property
    def update_attempt(self) -> Path:
        return self[UPDATE_ATTEMPT]

    @property
    def updater(self) -> Path:
        return self[UPDATER]

    def first_boot_lock(self, slug: str) -> Path:
        return self[FIRST_BOOT_LOCKS] / f"{slug}.lock"

    @property
    def policy_marks(self) -> Path:
        return self[POLICY_MARKS]

    @property
    def docker_seccomp(self) -> Path:
        return self[DOCKER_SECCOMP]


def table() -> str:
    """The layout as the Markdown table of docs/design.md."""
    rows = [("`<state>/" + place.name + ("/" if place.kind == FOLDER else "") + "`", place.kind, place.holds)
            for place in TOOL_PLACES]
    rows.append(("`<state>/<project>/`", FOLDER, "one per project, named by its slug; what follows is in it"))
    rows += [("`<project>/" + place.name + ("/" if place.kind == FOLDER else "") + "`", place.kind, place.holds)
             for place in PROJECT_PLACES]
    lines = ["| path | kind | what it holds |", "| --- | --- | --- |"]
    lines += [f"| {path} | {kind} | {holds} |" for path, kind, holds in rows]
    return "\n".join(lines) + "\n"

