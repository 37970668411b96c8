"""What the tidemark image carries, checked without building it.

``make compose-test`` is the only test that builds and starts the image, and it is not part of
``make test``: an image without a file the runtime reads by default (the pipelines file, the sql/
migrations, the DAGs, the plugins, the contract check's jar) would otherwise go unnoticed until a
deployment stops at start-up. This test stages the offline image's build context exactly as
``docker/build-images.sh`` does (``docker/stage-context.sh``, without the wheelhouse), follows the
COPY instructions of ``docker/local/tidemark.Dockerfile`` from image paths back to that context,
and requires every file the runtime reads by default to be there. The paths come from the code and
the compose file (the settings' defaults, the migrations folder, Airflow's folders, the jars folder
and the jars a Spark job requires), not from a list kept here.
"""

from __future__ import annotations

import fnmatch
import shlex
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

from spark_jobs.settings import PROJECT_ROOT, Settings
from spark_jobs.spark import CONTRACT_JARS, LOG_CONFIG, REQUIRED_JARS
from tidemark.migrations import SQL_DIR, discover

ROOT = Path(__file__).resolve().parents[3]
STAGE = ROOT / "docker" / "stage-context.sh"
LOCAL_DOCKERFILE = ROOT / "docker" / "local" / "tidemark.Dockerfile"
DOCKERFILE = ROOT / "docker" / "airflow" / "Dockerfile"
IMAGE_FILES = ROOT / "docker" / "image-files"
COMPOSE_FILE = ROOT / "docker-compose.yaml"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the last stage (the image), continuation lines joined."""
    lines = [line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    parsed = [(op.upper(), args) for op, _, args in (line.strip().partition(" ") for line in joined.splitlines()) if op]
    last_from = max(i for i, (op, _) in enumerate(parsed) if op == "FROM")
    return parsed[last_from:]


def image_layout(dockerfile: Path) -> tuple[PurePosixPath, list[tuple[PurePosixPath, PurePosixPath, bool]]]:
    """The folder the image installs tidemark from (the WORKDIR of ``pip install -e .``), and
    (image path, context path, is a folder's content) for each COPY from the build context."""
    workdir, checkout, copies = PurePosixPath("/"), None, []
    for op, args in instructions(dockerfile):
        if op == "WORKDIR":
            workdir = workdir / args.strip()
        elif op == "RUN" and " -e ." in args:
            checkout = workdir
        elif op == "COPY" and not args.startswith("--from"):
            *sources, dest = shlex.split(args)
            target = workdir / dest
            for source in sources:
                if "*" in source:  # build tools for the install, not read at run time
                    continue
                name = PurePosixPath(source.rstrip("/"))
                if source.endswith("/"):
                    copies.append((target, name, True))
                else:
                    copies.append(
                        (target / name.name if dest.endswith("/") or len(sources) > 1 else target, name, False)
                    )
    assert checkout is not None, f"{dockerfile.name} installs no editable tidemark (`pip install -e .`)"
    return checkout, copies


def in_context(
    context: Path, copies: list[tuple[PurePosixPath, PurePosixPath, bool]], path: PurePosixPath
) -> Path | None:
    """Where the image's ``path`` comes from in ``context``, or None when no COPY brings it."""
    for target, source, folder in sorted(copies, key=lambda c: len(c[0].parts), reverse=True):
        if folder and path.is_relative_to(target):
            return context / source / path.relative_to(target)
        if not folder and path == target:
            return context / source
    return None


def airflow_env() -> dict[str, str]:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    return {key: str(value) for key, value in compose["services"]["airflow-scheduler"]["environment"].items()}


def checkout_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def runtime_reads(checkout: PurePosixPath) -> dict[str, list[tuple[PurePosixPath, str]]]:
    """What the runtime reads by default, by what it is for: (image path, how to check it), where
    ``file`` means that file and ``prefix`` a file in that folder whose name starts so."""
    settings = Settings.from_env({})
    env = airflow_env()

    def of_checkout(path: Path) -> PurePosixPath:
        return checkout / path.relative_to(PROJECT_ROOT).as_posix()

    def tree(folder: Path, image_folder: PurePosixPath) -> list[tuple[PurePosixPath, str]]:
        return [(image_folder / p.relative_to(folder).as_posix(), "file") for p in checkout_files(folder)]

    jars = PurePosixPath(env["TIDEMARK_JARS_DIR"])
    return {
        # spark_jobs.settings finds the checkout (and its pipelines.yaml) by its pyproject.toml.
        "the project": [(of_checkout(PROJECT_ROOT / "pyproject.toml"), "file"), (of_checkout(LOG_CONFIG), "file")],
        "the pipelines file": [(of_checkout(settings.pipelines_file), "file")],
        "the migrations": [(of_checkout(m.path), "file") for m in discover()] or [(of_checkout(SQL_DIR), "file")],
        "the DAGs": tree(ROOT / "dags", PurePosixPath(env["AIRFLOW__CORE__DAGS_FOLDER"])),
        "the plugins": tree(ROOT / "plugins", PurePosixPath(env["AIRFLOW__CORE__PLUGINS_FOLDER"])),
        "the packages": tree(ROOT / "spark_jobs", checkout / "spark_jobs")
        + tree(ROOT / "tidemark", checkout / "tidemark"),
        "the jars": [(jars / "spark" / p, "prefix") for p in REQUIRED_JARS]
        + [(jars / "contract" / p, "prefix") for p in CONTRACT_JARS],
    }


def missing_from_image(context: Path, dockerfile: Path) -> list[str]:
    """Each file the runtime reads by default that the image built from ``context`` by
    ``dockerfile`` would lack, as ``what: image path``."""
    checkout, copies = image_layout(dockerfile)
    missing = []
    for what, paths in runtime_reads(checkout).items():
        for path, kind in paths:
            folder = in_context(context, copies, path.parent if kind == "prefix" else path)
            found = (
                folder is not None and folder.is_dir() and any(p.name.startswith(path.name) for p in folder.iterdir())
                if kind == "prefix"
                else folder is not None and folder.is_file()
            )
            if not found:
                missing.append(f"{what}: {path}{'*' if kind == 'prefix' else ''}")
    return missing


@pytest.fixture(scope="module")
def local_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline image's build context as docker/build-images.sh stages it (without the wheelhouse)."""
    if not (ROOT / ".tidemark" / "jars" / "contract").is_dir():
        pytest.fail("no .tidemark/jars: run `make jars` (make test-unit does)")
    context = tmp_path_factory.mktemp("image") / "context"
    subprocess.run([str(STAGE), str(context)], cwd=ROOT, check=True, capture_output=True, text=True)
    return context


def test_the_offline_image_carries_everything_the_runtime_reads_by_default(local_context: Path) -> None:
    assert missing_from_image(local_context, LOCAL_DOCKERFILE) == []


@pytest.mark.parametrize(
    ("removed", "expected"),
    [
        ("src/pipelines.yaml", "the pipelines file: /opt/tidemark/pipelines.yaml"),
        ("src/sql", "the migrations: /opt/tidemark/sql/"),
        ("src/dags/tidemark_ingest.py", "the DAGs: /opt/tidemark/dags/tidemark_ingest.py"),
        ("src/plugins", "the plugins: /opt/tidemark/plugins/"),
        ("jars/contract", "the jars: /opt/tidemark/jars/contract/tidemark-contract-*"),
    ],
    ids=["pipelines", "migrations", "dags", "plugins", "contract-jar"],
)
def test_the_check_catches_a_file_missing_from_the_context(
    local_context: Path, tmp_path: Path, removed: str, expected: str
) -> None:
    context = tmp_path / "context"
    subprocess.run(["cp", "-al", str(local_context), str(context)], check=True)
    target = context / removed
    subprocess.run(["rm", "-rf", str(target)], check=True)
    missing = missing_from_image(context, LOCAL_DOCKERFILE)
    assert any(line.startswith(expected) for line in missing), missing


def listed() -> list[str]:
    """The paths docker/image-files lists."""
    lines = (line.strip() for line in IMAGE_FILES.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (or a folder above it) out of the repository's build
    context; its patterns are names or ``**/`` names, without exceptions (checked)."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "an exception in .dockerignore: teach this check"
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], p[3:]) if p.startswith("**/") else fnmatch.fnmatchcase(prefix, p)
        for p in patterns
        for prefix in prefixes
    )


def test_both_recipes_of_the_image_copy_the_one_list() -> None:
    # The offline image: docker/build-images.sh stages the context with docker/stage-context.sh,
    # which puts what docker/image-files lists under src/; the Dockerfile copies src/ to the checkout.
    assert 'docker/stage-context.sh "$CONTEXT"' in (ROOT / "docker" / "build-images.sh").read_text()
    checkout, copies = image_layout(LOCAL_DOCKERFILE)
    assert (checkout, PurePosixPath("src"), True) in copies
    # The registry-connected image: its `src` stage runs the same script on the same list, and the
    # image copies that stage's output to the same checkout.
    text = DOCKERFILE.read_text()
    assert "FROM python:3.11-slim-bookworm AS src" in text
    assert "RUN docker/stage-context.sh --src-only /src" in text
    registry = instructions(DOCKERFILE)
    workdirs = [args for op, args in registry[: registry.index(("COPY", "--from=src /src/ ./"))] if op == "WORKDIR"]
    assert PurePosixPath(workdirs[-1]) == checkout
    # The repository's build context (.dockerignore) keeps every listed path and the staging itself.
    for path in [*listed(), "docker/stage-context.sh", "docker/image-files"]:
        assert (ROOT / path).exists(), path
        assert not dockerignored(path), f".dockerignore leaves {path} out of docker/airflow/Dockerfile's context"
    # The jars the runtime requires come from its Maven stage into the same jars folder.
    jars = airflow_env()["TIDEMARK_JARS_DIR"]
    for folder in ("spark", "contract"):
        assert ("COPY", f"--from=jars /jars/{folder} {jars}/{folder}") in registry, folder


def test_the_dockerignore_check_catches_an_excluded_path() -> None:
    assert dockerignored("tests/unit") and dockerignored("spark_jobs/__pycache__/x.pyc")
    assert not dockerignored("pipelines.yaml")


def test_compose_mounts_the_pipelines_file_over_the_images_default_in_every_tidemark_service() -> None:
    checkout, _ = image_layout(LOCAL_DOCKERFILE)
    default = checkout / Settings.from_env({}).pipelines_file.relative_to(PROJECT_ROOT).as_posix()
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    tidemark = [name for name, s in compose["services"].items() if s.get("image", "").startswith("tidemark:")]
    assert len(tidemark) == 7, tidemark  # five Airflow services, the Spark master and worker
    for name in tidemark:
        mounts = [m for m in compose["services"][name]["volumes"] if isinstance(m, dict) and m["type"] == "bind"]
        assert mounts == [
            {
                "type": "bind",
                "source": "${TIDEMARK_PIPELINES_FILE:-./pipelines.yaml}",
                "target": str(default),
                "read_only": True,
            }
        ], name
