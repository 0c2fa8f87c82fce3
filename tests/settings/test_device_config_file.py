"""``--device-config-file``: HAMi's ``device-config.yaml`` read at start-up (docs/configuration.md#configuration).

Covers: HAMi v2.10's chart payload (every vendor section, the MIG allow-list) accepted unchanged, its names and
defaults flowing into the server's catalog; precedence (explicit flag > file > chart default); custom Hygon names
and Iluvatar chips with ``--enable-iluvatar``; ``HAMI_DEVICE_CONFIG_FILE``; and every refusal naming the file and
what is wrong: a missing file, YAML that does not parse (with its line), a document that is not a map, a key of
the wrong type, a bad resource name, two families claiming one resource.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_web.cli import build_parser
from hami_web.settings import Settings, SettingsError, build_settings, published_settings, settings_from_published

# HAMi v2.10.0's chart payload (charts/hami/templates/scheduler/device-configmap.yaml, rendered with the defaults).
HAMI_CHART_CONFIG = (Path(__file__).resolve().parents[1] / "fixtures" / "hami-v2.10-device-config.yaml").read_text()


def _settings(*argv: str, environ: dict[str, str] | None = None) -> Settings:
    return build_settings(build_parser().parse_args(["serve", *argv]), environ or {})


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "device-config.yaml"
    path.write_text(text)
    return str(path)


def test_hami_chart_payload_is_accepted_unchanged(tmp_path: Path) -> None:
    settings = _settings("--device-config-file", _file(tmp_path, HAMI_CHART_CONFIG), "--enable-iluvatar")
    assert [family.cw for family in settings.devices] == ["AMD", "AWSNeuron", "BI-V100", "BI-V150", "Biren", "DCU",
                                                          "Enflame", "GCU", "MLU", "MR-V100", "MR-V50", "Metax-GPU",
                                                          "Metax-SGPU", "Mthreads", "NVIDIA", "Vastai", "XPU", "kunlun"]
    assert settings.devices["Enflame"].resources.count == "enflame.com/drs-gcu"  # the chart's resourceNameDRSGCU
    assert settings.devices["NVIDIA"].resources.count == "nvidia.com/gpu"
    assert settings.devices["DCU"].resources.memory == "hygon.com/dcumem"
    assert settings.devices["MR-V100"].memory_factor == 256
    assert not settings.overwrite_env  # the chart renders `overwriteEnv: "false"` as text


def test_without_enable_iluvatar_the_iluvatars_section_is_read_but_not_enabled(tmp_path: Path) -> None:
    settings = _settings("--device-config-file", _file(tmp_path, HAMI_CHART_CONFIG))
    assert [family.cw for family in settings.devices] == ["AMD", "AWSNeuron", "Biren", "DCU", "Enflame", "GCU", "MLU",
                                                          "Metax-GPU", "Metax-SGPU", "Mthreads", "NVIDIA", "Vastai",
                                                          "XPU", "kunlun"]


def test_file_values_fill_what_no_flag_gives_and_flags_win(tmp_path: Path) -> None:
    path = _file(tmp_path, "nvidia:\n  resourceCountName: example.com/vgpu\n  defaultCores: 30\n"
                           "  defaultMemory: 2000\n  memoryFactor: 4\nhygon:\n  resourceCountName: example.com/dcu\n"
                           "  memoryFactor: 2\n")
    settings = _settings("--device-config-file", path, "--default-cores", "10")
    assert settings.resources.count == "example.com/vgpu"
    assert settings.default_cores == 10  # the flag
    assert settings.default_mem_mib == 2000  # the file
    assert settings.devices["NVIDIA"].memory_factor == 4
    assert settings.devices["DCU"].resources.count == "example.com/dcu"
    assert settings.devices["DCU"].resources.memory == "hygon.com/dcumem"  # the chart default for what is left out
    assert settings.devices["DCU"].memory_factor == 2


def test_custom_iluvatar_chips_become_families(tmp_path: Path) -> None:
    path = _file(tmp_path, "iluvatars:\n- chipName: BI-V200\n  commonWord: BI-V200\n")
    family = _settings("--device-config-file", path, "--enable-iluvatar").devices["BI-V200"]
    assert family.resources.count == "iluvatar.ai/BI-V200-vgpu"
    assert family.register_key == "hami.io/node-BI-V200-register"
    assert family.allocated_key == "hami.io/BI-V200-devices-allocated"


def test_the_environment_variable_names_the_file_too(tmp_path: Path) -> None:
    path = _file(tmp_path, "hygon:\n  resourceCoreName: example.com/dcu-cores\n")
    settings = _settings(environ={"HAMI_DEVICE_CONFIG_FILE": path})
    assert settings.devices["DCU"].resources.cores == "example.com/dcu-cores"


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("nvidia: [1, 2\n", "not valid YAML (line 2, column 1)", id="yaml-does-not-parse"),
    pytest.param("- nvidia\n", "the document must be a map of device sections, got a list", id="not-a-map"),
    pytest.param("nvidia: 3\n", "nvidia: expected a map, got an integer", id="section-not-a-map"),
    pytest.param("nvidia:\n  defaultCores: lots\n", "nvidia.defaultCores: expected an integer, got a string",
                 id="integer-is-text"),
    pytest.param("nvidia:\n  defaultCores: 150\n", "nvidia.defaultCores: 150 is outside 0..100", id="cores-over-100"),
    pytest.param("nvidia:\n  overwriteEnv: maybe\n", "nvidia.overwriteEnv: expected true or false",
                 id="boolean-is-text"),
    pytest.param("hygon:\n  resourceCountName: dcu\n", "hygon.resourceCountName: 'dcu' is not an extended resource",
                 id="bad-resource-name"),
    pytest.param("iluvatars: {chipName: x}\n", "iluvatars: expected a list, got a map", id="iluvatars-not-a-list"),
    pytest.param("iluvatars:\n- chipName: x\n", "iluvatars[0].commonWord: None is not a common word",
                 id="iluvatar-without-common-word"),
    pytest.param("hygon:\n  resourceCountName: nvidia.com/gpu\n",
                 "resource nvidia.com/gpu is used by both DCU and NVIDIA", id="two-families-one-resource"),
])
def test_a_bad_device_config_stops_start_up_naming_the_file_and_the_key(tmp_path: Path, text: str,
                                                                       message: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        _settings("--device-config-file", path)
    assert message in str(caught.value)
    if "used by both" not in message:
        assert f"--device-config-file: {path}" in str(caught.value)


def test_a_missing_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"--device-config-file: .*missing\.yaml: cannot read it: No such file"):
        _settings("--device-config-file", str(tmp_path / "missing.yaml"))


def test_the_device_config_read_is_published_for_the_tools_and_read_back(tmp_path: Path) -> None:
    settings = _settings("--device-config-file", _file(tmp_path, HAMI_CHART_CONFIG), "--enable-iluvatar")
    published = published_settings(settings)
    assert "device-config.yaml" in published
    back = settings_from_published(published, where="ConfigMap x/y")
    assert [family.cw for family in back.devices] == [family.cw for family in settings.devices]
    assert back.devices == settings.devices
    assert published_settings(back) == published


def test_a_published_device_config_that_does_not_parse_names_the_configmap_and_key() -> None:
    with pytest.raises(SettingsError, match=r"^ConfigMap x/y: device-config.yaml: hygon: expected a map"):
        settings_from_published({"device-config.yaml": "hygon: 3\n"}, where="ConfigMap x/y")


def test_enable_ascend_with_the_charts_payload_gives_its_seven_chips(tmp_path: Path) -> None:
    settings = _settings("--device-config-file", _file(tmp_path, HAMI_CHART_CONFIG), "--enable-ascend")
    assert [family.cw for family in settings.devices if family.kind == "ascend"] == [
        "Ascend310P", "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910B4-1", "Ascend910C"]
    assert not settings.devices["Ascend910B3"].soft_split_allowed({})  # hamiVnpuCore: false
    assert _settings("--enable-ascend").devices == settings.devices  # the chart's values are the defaults


def test_a_bad_vnpus_entry_fails_start_up_naming_the_key(tmp_path: Path) -> None:
    path = _file(tmp_path, "vnpus:\n  configs:\n  - commonWord: Ascend910B3\n    templates: [{name: x}]\n")
    with pytest.raises(SettingsError, match=r"vnpus.configs\[0\].templates\[0\].memory: a template needs its memory"):
        _settings("--device-config-file", path, "--enable-ascend")


def test_the_vnpus_read_are_published_and_read_back(tmp_path: Path) -> None:
    path = _file(tmp_path, "vnpus:\n  hamiVnpuCore: true\n  configs:\n  - commonWord: Ascend910B3\n"
                           "    runtimeClassName: ascend\n    templates: [{name: half, memory: 32768}]\n")
    settings = _settings("--device-config-file", path, "--enable-ascend")
    back = settings_from_published(published_settings(settings), where="ConfigMap x/y")
    assert "ascend" in back.enabled_families and back.devices == settings.devices
    assert back.devices["Ascend910B3"].admission.runtime_class_name == "ascend"
