"""nccl_plugin: hpcx (issue 18, finding 8): HPC-X was unpacked but NCCL never told to load its
plugin, so SHARP went unused without an error. /etc/nccl.conf now names the plugin library
(NCCL_NET_PLUGIN takes a library name, NCCL's environment variable reference) and the linker
finds the plugin and HPC-X's SHARP library (HPC-X's documentation: the plugin is loaded from
the library search path)."""

from __future__ import annotations

from pathlib import Path

from cluster_tool.ansible import run_playbook

RENDER = Path(__file__).parent / "playbooks" / "nccl_conf.yml"
RENDERED = "# rendered by cluster-tool\nNCCL_IB_HCA==mlx5_0\n"


def _render(tmp_path: Path, plugin: str) -> dict[str, str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    conf = tmp_path / "nccl.conf.rendered"
    conf.write_text(RENDERED)
    out = tmp_path / "out"
    out.mkdir()
    result = run_playbook(
        RENDER,
        inventory,
        extravars={"out": str(out), "nccl_plugin": plugin, "nccl_conf_file": str(conf)},
        private_data_dir=tmp_path / "pdd",
        fact_cache=tmp_path / "facts",
    )
    assert result.rc == 0, [e.message for e in result.events if e.failed]
    return {p.name: p.read_text() for p in out.iterdir()}


def test_hpcx_plugin_is_named_in_nccl_conf_and_on_the_library_path(tmp_path: Path) -> None:
    files = _render(tmp_path, "hpcx")
    lines = files["nccl.conf"].splitlines()
    assert lines[:2] == RENDERED.splitlines()
    assert "NCCL_NET_PLUGIN=/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so" in lines
    dirs = [ln for ln in files["cluster-tool-hpcx.conf"].splitlines() if not ln.startswith("#")]
    assert dirs == ["/opt/hpcx/nccl_rdma_sharp_plugin/lib", "/opt/hpcx/sharp/lib"]


def test_the_packaged_plugin_leaves_nccl_conf_as_rendered(tmp_path: Path) -> None:
    # nccl-rdma-sharp-plugins installs libnccl-net.so on the default library path.
    files = _render(tmp_path, "package")
    assert files["nccl.conf"] == RENDERED
