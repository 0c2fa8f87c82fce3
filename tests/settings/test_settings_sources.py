"""One settings builder (`settings_from_texts`) for the command line, the environment and the published ConfigMap.

Covers: the same texts give the same `Settings` whether they come as flags, as ``HAMI_…`` variables or as the data of
the ConfigMap the server publishes for the tools; a flag wins over its variable; an error names where the bad text
came from (the flag, the variable, the ConfigMap's key), and the published settings never read the process's
environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from hami_web.settings import (
    PUBLISHED_FLAGS,
    SettingsError,
    add_arguments,
    build_settings,
    settings_from_published,
)

TEXTS = {"--node-scheduler-policy": "spread", "--gpu-scheduler-policy": "binpack,numa", "--default-mem": "2000",
         "--default-cores": "30", "--scheduler-name": "gpu-scheduler", "--node-label-selector": "gpu=on"}


def _flags(texts: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([f"{flag}={text}" for flag, text in texts.items()])


def _env(texts: dict[str, str]) -> dict[str, str]:
    return {"HAMI_" + flag.lstrip("-").upper().replace("-", "_"): text for flag, text in texts.items()}


def test_flags_environment_and_published_data_build_the_same_settings() -> None:
    assert set(TEXTS) <= set(PUBLISHED_FLAGS)
    by_flags = build_settings(_flags(TEXTS), environ={})
    by_env = build_settings(None, environ=_env(TEXTS))
    published = settings_from_published({flag.removeprefix("--"): text for flag, text in TEXTS.items()},
                                        where="ConfigMap ns/cm")
    assert by_flags == by_env == published
    assert (published.scheduler_name, published.default_mem_mib, published.gpu_scheduler_policy) == (
        "gpu-scheduler", 2000, "binpack,numa")


def test_a_flag_wins_over_its_variable() -> None:
    settings = build_settings(_flags({"--default-cores": "10"}), environ=_env({"--default-cores": "90"}))
    assert settings.default_cores == 10


@pytest.mark.parametrize(("build", "named"), [
    (lambda: build_settings(_flags({"--default-cores": "150"}), environ={}), "invalid value for --default-cores: "),
    (lambda: build_settings(None, environ=_env({"--default-cores": "150"})),
     "invalid value for --default-cores (from HAMI_DEFAULT_CORES): "),
    (lambda: settings_from_published({"default-cores": "150"}, where="ConfigMap ns/cm"),
     "ConfigMap ns/cm: invalid value for --default-cores: "),
])
def test_an_error_names_where_the_text_came_from(build: Callable[[], object], named: str) -> None:
    with pytest.raises(SettingsError) as refused:
        build()
    assert str(refused.value).startswith(named)


def test_the_published_settings_never_read_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_DEFAULT_CORES", "150")  # would be refused if read
    monkeypatch.setenv("HAMI_SCHEDULER_NAME", "from-the-environment")
    published = settings_from_published({"scheduler-name": "from-the-configmap"}, where="ConfigMap ns/cm")
    assert (published.scheduler_name, published.default_cores) == ("from-the-configmap", 0)
