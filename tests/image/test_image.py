"""The operator image that `make image` builds (scripts/build-image.sh), proven without a
container engine: it is a valid OCI archive (skopeo, from Debian's package, reads it), its
config runs `python3.11 -m trainjobs.cli operator` as UID/GID 65532, its root filesystem has
no shell, and, unpacked by umoci and entered with chroot as that user, its entry point answers
`operator --help`, lists the built-in kinds, and runs the operator against the test control
plane until a job Succeeds. Deselected from `make test` (minutes); `make image` runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.integration.operator_helpers import (
    CRDS_DIR,
    Namespace,
    free_port,
    job,
    replica,
    wait_for,
)
from trainjobs.testing import ControlPlane, apply_crds

pytestmark = [pytest.mark.image, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TRAINJOBS_CACHE", Path.home() / ".cache" / "trainjobs"))
ENTRY = ["/usr/bin/python3.11", "-m", "trainjobs.cli"]


def run(*argv: str, timeout: float = 900, **kw: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                            **kw)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout}\n{result.stderr}"
    return result  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive `make image` just built (IMAGE_ARCHIVE), else one built here."""
    if os.environ.get("IMAGE_ARCHIVE"):
        return Path(os.environ["IMAGE_ARCHIVE"])
    out = tmp_path_factory.mktemp("image") / "operator.oci.tar"
    result = run("bash", str(REPO / "scripts" / "build-image.sh"),
                 env={**os.environ, "IMAGE_OUT": str(out)})
    assert Path(result.stdout.strip().splitlines()[-1]) == out
    print(f"image archive: {out.stat().st_size / 2**20:.1f} MiB")
    return out


@pytest.fixture(scope="module")
def bundle(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image unpacked by umoci (the runtime bundle: rootfs/ and config.json)."""
    umoci = CACHE / "image" / f"tools-{_arch()}" / "usr" / "bin" / "umoci"
    where = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(archive) as tar:
        tar.extractall(where / "layout", filter="tar")
    version = json.loads((where / "layout" / "index.json").read_text())["manifests"][0][
        "annotations"]["org.opencontainers.image.ref.name"]
    run(str(umoci), "unpack", "--image", f"{where / 'layout'}:{version}", str(where / "bundle"))
    return where / "bundle"


def _arch() -> str:
    return run("dpkg", "--print-architecture").stdout.strip()


def test_archive_is_an_oci_image_skopeo_reads(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("./index.json")
        assert member is not None
        index = json.loads(member.read())
    ref = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    chart = (REPO / "charts" / "trainjobs" / "Chart.yaml").read_text()
    assert f'appVersion: "{ref}"' in chart  # the chart's default tag is this image's
    skopeo = CACHE / "image" / f"tools-{_arch()}" / "skopeo"  # build-image.sh fetched it
    found = run(str(skopeo), "inspect", "--config", f"oci-archive:{archive}")
    config = json.loads(found.stdout)["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ENTRY and config["Cmd"] == ["operator"]
    assert config["Labels"]["org.opencontainers.image.ref.name"] == f"trainjobs/operator:{ref}"


def test_rootfs_has_no_shell_and_runs_as_65532(bundle: Path) -> None:
    rootfs = bundle / "rootfs"
    assert not [s for s in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh") if
                (rootfs / s).exists() or (rootfs / s).is_symlink()]
    process = json.loads((bundle / "config.json").read_text())["process"]
    assert (process["user"]["uid"], process["user"]["gid"]) == (65532, 65532)
    assert process["args"] == [*ENTRY, "operator"]
    size = sum(f.stat().st_size for f in rootfs.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"root filesystem: {size / 2**20:.1f} MiB")


def chroot(bundle: Path, *args: str) -> list[str]:
    assert os.geteuid() == 0, "chroot needs root (run make image as root or in a user namespace)"
    binary = shutil.which("chroot")
    assert binary is not None, "chroot (coreutils) is needed"
    return [binary, "--userspec=65532:65532", str(bundle / "rootfs"), *ENTRY, *args]


def test_entrypoint_answers_help_and_lists_the_kinds(bundle: Path) -> None:
    env = {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    helped = run(*chroot(bundle, "operator", "--help"), env=env)
    assert "--kubeconfig" in helped.stdout and "--leader-elect" in helped.stdout
    plugins = run(*chroot(bundle, "plugins"), env=env)
    for kind in ("MxJob", "TfJob", "Caffe2Job"):
        assert kind in plugins.stdout
    # the chart's `helm test` pod runs `python -c ...` in this image
    run(*chroot(bundle)[:3], "/usr/bin/python", "-c", "import urllib.request", env=env)


def test_operator_from_the_image_runs_a_job_on_the_control_plane(
    bundle: Path, kube_cluster: ControlPlane, kube_namespace: str
) -> None:
    apply_crds(kube_cluster.kubeconfig, CRDS_DIR)
    bare_ns = Namespace(kube_cluster, kube_namespace)
    tmp = bundle / "rootfs" / "tmp"
    (tmp / "kubeconfig").write_text(bare_ns.plane.kubeconfig.read_text())
    os.chmod(tmp / "kubeconfig", 0o644)
    port = free_port()
    log = open(bundle / "operator.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        chroot(bundle, "operator", "--kubeconfig", "/tmp/kubeconfig", "--namespace",
               bare_ns.name, "--http-address", f"127.0.0.1:{port}"),
        stdout=log, stderr=subprocess.STDOUT, env={"HOME": "/tmp", "PYTHONUNBUFFERED": "1"})
    try:
        def ready() -> bool:
            assert proc.poll() is None, (bundle / "operator.log").read_text()
            try:
                import urllib.request
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, "the image's operator /readyz", 90)
        bare_ns.create(job("MxJob", "from-image", {
            "Scheduler": replica("MxJob"), "Server": replica("MxJob"),
            "Worker": replica("MxJob", 2, exit_code=0, run="1s")}))
        status = bare_ns.wait_finished("MxJob", "from-image", timeout=60)
        assert status["state"] == "Succeeded", status
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        log.close()
    assert code == 0, (bundle / "operator.log").read_text()
