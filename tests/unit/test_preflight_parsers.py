"""Parsers on the real H200 recordings and on drifted / [N/A] variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.preflight import host_info, nvsmi_parse
from launcher.preflight.ib_ports import collect_ib_ports
from launcher.preflight.kernel_log import parse_dmesg
from tests.unit.preflight_helpers import FAULTS, FIXTURES, HEALTHY, make_ib_tree


def read(path: Path) -> str:
    return path.read_text()


def test_xml_real_h200_values() -> None:
    driver, gpus = nvsmi_parse.parse_xml(read(HEALTHY / "nvidia-smi-q.xml"))
    assert driver == "580.159.04"
    assert [g.bus_id for g in gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    g0, g1 = gpus
    assert g0.name == "NVIDIA H200" and g0.uuid == "GPU-14b1be71-daec-f42d-f9c1-66528893fd24"
    assert (g0.temperature_c, g0.memory_temperature_c) == (34.0, 37.0)
    assert (g1.temperature_c, g1.memory_temperature_c) == (37.0, 38.0)
    assert g0.power_draw_w == 98.58 and g0.power_limit_w == 700.0
    assert g0.default_power_limit_w == 700.0
    assert (g0.pcie_gen_current, g0.pcie_gen_max, g0.pcie_width_current) == (5, 5, 16)
    assert g0.remap_pending is False and g0.remap_failure is False
    assert g0.remapped_rows_uncorrectable == 0
    assert g0.ecc_enabled is True and g0.ecc_volatile_uncorrectable == 0
    assert g0.clock_events["gpu_idle"] is True and g0.clock_events["hw_slowdown"] is False
    assert g0.recovery_action == "None" and g0.persistence_mode is True


def test_xml_derived_faults_are_read() -> None:
    _, gpus = nvsmi_parse.parse_xml(read(FAULTS / "remap-pending" / "nvidia-smi-q.xml"))
    assert [g.remap_pending for g in gpus] == [False, True]
    _, gpus = nvsmi_parse.parse_xml(read(FAULTS / "ecc-dbe" / "nvidia-smi-q.xml"))
    assert gpus[0].ecc_volatile_uncorrectable == 2


def test_xml_old_field_names() -> None:
    _, gpus = nvsmi_parse.parse_xml(read(FAULTS / "drift-old-names" / "nvidia-smi-q.xml"))
    assert gpus[0].clock_events["hw_slowdown"] is True
    assert gpus[1].clock_events["hw_slowdown"] is False
    assert gpus[0].power_draw_w == 98.58 and gpus[0].power_limit_w == 700.0


def test_xml_na_values_become_none() -> None:
    _, gpus = nvsmi_parse.parse_xml(read(FAULTS / "na-values" / "nvidia-smi-q.xml"))
    for g in gpus:
        assert g.temperature_c is None and g.memory_temperature_c is None
        assert g.remap_pending is None and g.pcie_width_current is None
        assert g.power_limit_w is None
        assert g.ecc_volatile_uncorrectable == 0  # SRAM counters still reported


@pytest.mark.parametrize("text", ["", "garbage", "<other/>"])
def test_xml_unusable_raises(text: str) -> None:
    with pytest.raises(nvsmi_parse.ParseError):
        nvsmi_parse.parse_xml(text)


def test_xml_truncated_raises() -> None:
    with pytest.raises(nvsmi_parse.ParseError):
        nvsmi_parse.parse_xml(read(FAULTS / "not-xml" / "nvidia-smi-q.xml"))


def test_csv_real_header_output() -> None:
    fields = [
        "index",
        "name",
        "pci.bus_id",
        "driver_version",
        "memory.total",
        "temperature.gpu",
        "power.draw",
        "clocks.sm",
        "clocks.max.sm",
        "ecc.errors.uncorrected.volatile.total",
        "clocks_event_reasons.active",
    ]
    gpus = nvsmi_parse.parse_csv(read(HEALTHY / "query-gpu-header.csv"), fields=fields)
    assert [g.temperature_c for g in gpus] == [35.0, 35.0]
    assert gpus[1].power_draw_w == 104.75
    assert gpus[0].clock_events["gpu_idle"] is True
    assert gpus[0].driver_version == "580.159.04"


def test_csv_with_remapped_rows_and_noheader() -> None:
    gpus = nvsmi_parse.parse_csv(
        read(HEALTHY / "query-gpu.csv"), read(FAULTS / "remap-pending" / "query-remapped-rows.csv")
    )
    assert [g.remap_pending for g in gpus] == [False, True]
    body = "\n".join(read(HEALTHY / "query-gpu.csv").splitlines()[1:])
    noheader = nvsmi_parse.parse_csv(body)
    assert [g.bus_id for g in noheader] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert noheader[1].temperature_c == 37.0


def test_csv_throttle_alias_and_na() -> None:
    text = (
        "index, pci.bus_id, clocks_throttle_reasons.active, temperature.gpu\n"
        "0, 00000000:00:06.0, 0x0000000000000008, [N/A]\n"
    )
    (gpu,) = nvsmi_parse.parse_csv(text, fields=["index", "pci.bus_id"])
    assert gpu.clock_events["hw_slowdown"] is True and gpu.temperature_c is None


def test_csv_ragged_row_raises() -> None:
    with pytest.raises(nvsmi_parse.ParseError):
        nvsmi_parse.parse_csv("index, pci.bus_id\n0\n")


def test_nvlink_real_and_inactive() -> None:
    links = nvsmi_parse.parse_nvlink(read(HEALTHY / "nvlink-s.txt"), read(HEALTHY / "nvlink-e.txt"))
    assert [nv.gpu_index for nv in links] == [0, 1]
    assert all(len(nv.link_active) == 18 and all(nv.link_active.values()) for nv in links)
    assert links[0].link_speed_gbps[0] == 26.562
    assert links[1].errors[17] == {"replay": 0, "recovery": 0, "crc": 0}
    down = nvsmi_parse.parse_nvlink(read(FAULTS / "nvlink-down" / "nvlink-s.txt"))
    assert down[1].link_active[5] is False and 5 not in down[1].link_speed_gbps
    crc = nvsmi_parse.parse_nvlink("", read(FAULTS / "nvlink-crc" / "nvlink-e.txt"))
    assert crc[0].errors[3]["crc"] == 500


def test_value_helpers() -> None:
    assert nvsmi_parse.to_float("[Not Supported]") is None
    assert nvsmi_parse.to_int("16x") == 16 and nvsmi_parse.to_int("0x8") == 8
    assert nvsmi_parse.to_bool("Not Active") is False and nvsmi_parse.to_bool("N/A") is None


def test_dmesg_xids() -> None:
    events = parse_dmesg(read(FIXTURES / "dmesg" / "xid79.txt"))
    assert [(e.pci, e.code, e.uptime_s) for e in events] == [
        ("0000:00:07", 79, 5000.10021),
        ("0000:00:07", 79, 5001.2),
    ]
    assert parse_dmesg(read(FIXTURES / "dmesg" / "clean.txt")) == []


def test_procfs_parsers() -> None:
    mem = host_info.parse_meminfo("MemTotal: 2048 kB\nMemAvailable: 1024 kB\nHugePages_Total: 0\n")
    assert mem["MemTotal"] == 2.0 and mem["MemAvailable"] == 1.0
    assert host_info.parse_cpuinfo("processor\t: 0\n\nprocessor\t: 1\n") == 2
    assert host_info.parse_mounts("a /mnt/my\\040disk ext4 rw 0 0\n") == ["/mnt/my disk"]


def test_ib_sysfs(tmp_path: Path) -> None:
    make_ib_tree(
        tmp_path,
        {
            "mlx5_0/1": {
                "state": "4: ACTIVE",
                "phys_state": "5: LinkUp",
                "rate": "400 Gb/sec (4X NDR)",
                "link_layer": "InfiniBand",
                "link_downed": "3",
            },
            "mlx5_1/1": {
                "state": "1: DOWN",
                "phys_state": "3: Disabled",
                "rate": "10 Gb/sec (4X SDR)",
            },
        },
    )
    ports = collect_ib_ports({"GANTRY_SYSFS_ROOT": str(tmp_path)})
    assert [(p.device, p.state, p.phys_state, p.rate_gbps, p.link_downed) for p in ports] == [
        ("mlx5_0", "ACTIVE", "LinkUp", 400.0, 3),
        ("mlx5_1", "DOWN", "Disabled", 10.0, None),
    ]
    assert collect_ib_ports({"GANTRY_SYSFS_ROOT": str(tmp_path / "none")}) == []
