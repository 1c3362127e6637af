"""gt_runtime_config_describe through the binding: every GANTRY_* switch with its default or
the value set, and a bad value refused naming the variable, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from launcher.errors import UserInputError
from launcher.native.binding import NativeLibrary
from launcher.native.runtime_config import SWITCHES, recorded


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for switch in SWITCHES:
        monkeypatch.delenv(switch.name, raising=False)
    yield monkeypatch


def test_defaults_are_recorded(native_lib: NativeLibrary, clean_env: pytest.MonkeyPatch) -> None:
    assert recorded(native_lib) == {s.name: s.default for s in SWITCHES}


def test_values_set_are_recorded(native_lib: NativeLibrary,
                                 clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GANTRY_OPT_OVERLAP", "3")
    clean_env.setenv("GANTRY_DP_BUCKET_MB", "0.5")
    clean_env.setenv("GANTRY_P2P_TRANSPORT", "nccl")
    clean_env.setenv("GANTRY_CUDA_GRAPHS", "0")
    clean_env.setenv("GANTRY_PROFILE_OPS", "")  # empty: the default
    values = recorded(native_lib)
    assert (values["GANTRY_OPT_OVERLAP"], values["GANTRY_DP_BUCKET_MB"],
            values["GANTRY_P2P_TRANSPORT"], values["GANTRY_CUDA_GRAPHS"],
            values["GANTRY_PROFILE_OPS"]) == ("3", "0.5", "nccl", "0", "0")


@pytest.mark.parametrize("name,value,allowed", [
    ("GANTRY_CE_FUSED", "yes", "(allowed: 0, 1)"),
    ("GANTRY_GEMM_CANDIDATES", "64", "(an integer 1..32)"),
    ("GANTRY_P2P_MAX_CTAS", "-1", "(an integer 0..64; 0 = NCCL's default)"),
    ("GANTRY_ATTENTION", "flash", "(allowed: auto, cudnn, reference)"),
    ("GANTRY_PROFILE_OPS", "on", "(allowed: 0, 1, prefill)"),
    ("GANTRY_DP_BUCKET_MB", "25MB", "(a number of MB, 0 to 1048576; 0 = one bucket per layer)"),
])
def test_bad_value_names_variable_value_and_allowed(
    native_lib: NativeLibrary, clean_env: pytest.MonkeyPatch, name: str, value: str,
    allowed: str,
) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(UserInputError) as err:
        recorded(native_lib)
    assert str(err.value) == f"{name}='{value}' is not allowed {allowed}"
