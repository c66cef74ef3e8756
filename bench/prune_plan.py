"""The prune planner over 1,000 and over 10,000 synthetic artifacts.

Target: 10,000 artifacts planned in under 1 s, and at most 12 times the time of 1,000
(the planner stays near-linear). The last line printed is the ratio.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from opencode_sandbox.core.naming import (
    home_volume_name,
    managed_labels,
    runner_image,
    task_name,
    vm_name,
)
from opencode_sandbox.core.prune_plan import (
    DockerImageFact,
    ImageFact,
    Inventory,
    ProjectRecord,
    SandboxFact,
    VolumeFact,
    plan_prune,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)
AGE = timedelta(days=7)
TARGET_SECONDS = 1.0
TARGET_RATIO = 12.0
OURS = {"org.opencode-sandbox.managed": "true"}


def synthetic_inventory(artifacts: int) -> Inventory:
    """About `artifacts` artifacts over artifacts/10 projects: a VM (every third one stale, every
    fifth missing), a task sandbox, two home volumes, three runtime images, three Docker images
    (one dangling) and a state file each; every eleventh project also has a VM on the other
    runtime, and a foreign container runs on one image in a hundred."""
    sandboxes, volumes, images, docker_images, elsewhere, foreign = [], [], [], [], [], set()
    projects = {}
    for index in range(artifacts // 10):
        slug = f"p{index}-{index:014d}"
        when = NOW - timedelta(days=30 if index % 3 == 0 else 1, seconds=index)
        current = runner_image(slug, "c3")
        if index % 5:
            sandboxes.append(SandboxFact(vm_name(slug), index % 7 == 0, current, when, when, managed_labels(slug)))
        sandboxes.append(SandboxFact(task_name(slug, 1), False, current, when, when, managed_labels(slug)))
        for age_days in (40, 20):
            moment = NOW - timedelta(days=age_days, seconds=index)
            volumes.append(VolumeFact(home_volume_name(slug, moment), moment, managed_labels(slug)))
        for number in range(3):
            created = NOW - timedelta(days=30 - number * 10, seconds=index)
            reference = runner_image(slug, f"c{number + 1}")
            images.append(ImageFact(reference, f"sha256:{index:060d}{number:04d}", created, OURS))
            if number < 2:
                docker_images.append(DockerImageFact(f"sha256:{index:060d}{number:04d}", reference, created, OURS))
        docker_images.append(DockerImageFact(f"sha256:d{index:063d}", None, NOW - timedelta(days=9), OURS))
        projects[slug] = ProjectRecord(volumes[-1].name, current, None)
        if index % 11 == 0:
            elsewhere.append(SandboxFact(vm_name(slug), False, runner_image(slug, "c2"), when, when,
                                         managed_labels(slug)))
        if index % 100 == 0:
            foreign.add(runner_image(slug, "c1"))
    return Inventory(tuple(sandboxes), tuple(volumes), tuple(images), tuple(docker_images), projects,
                     tuple(elsewhere), frozenset(foreign))


def best_times(inventories: dict[str, Inventory], rounds: int) -> dict[str, float]:
    """The fastest of `rounds` runs each, taken in turn so that load on the machine hits both."""
    best = {name: float("inf") for name in inventories}
    for _ in range(rounds):
        for name, inventory in inventories.items():
            start = time.perf_counter()
            plan_prune(inventory, NOW, AGE)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> float:
    inventories = {"1,000": synthetic_inventory(1_000), "10,000": synthetic_inventory(10_000)}
    best_times(inventories, 2)  # warm-up
    best = best_times(inventories, 15)
    for name, inventory in inventories.items():
        planned = len(plan_prune(inventory, NOW, AGE))
        print(f"{name + ' artifacts:':<18}{best[name] * 1000:8.1f} ms  ({planned} removals)")
    ratio = best["10,000"] / best["1,000"]
    print(f"10,000 artifacts target: < {TARGET_SECONDS:.0f} s; ratio target: <= {TARGET_RATIO:g}")
    print(f"{ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main()
