"""When Dagster rebuilds a partition on its own: Declarative Automation, one condition for every stage.

A stage asset of a partition is requested by the automation sensor when

* an input changed: an upstream stage was materialized again, or, for `run_config`, the run
  config file was observed with new contents (the sensor observes a file only when its hash
  changes, so starting `dagster dev` requests nothing);
* or, at the nightly tick (`PPB_NIGHTLY_CRON`, default 02:00, in `PPB_NIGHTLY_TIMEZONE`, default
  UTC), the partition was never built, or the stage's code version changed since it was last
  handled: every run config re-estimated with the code of the day, and only what changed rebuilt.

Never while an upstream stage is missing or running, or the stage itself is running. Dagster
records why each request was made (the automation sensor's evaluations in the UI).
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import dagster as dg

from pipelines.resources import SettingError

CONFIG_FILE = "run_config_file"  # the observable source asset run_config reads


def _setting(name: str, default: str) -> str:
    return dg.EnvVar(name).get_value(default) or default


def _nightly() -> tuple[str, str]:
    """$PPB_NIGHTLY_CRON and $PPB_NIGHTLY_TIMEZONE, checked: a bad cron was Dagster's traceback at
    import, an unknown time zone went unnoticed."""
    cron, timezone = _setting("PPB_NIGHTLY_CRON", "0 2 * * *"), _setting("PPB_NIGHTLY_TIMEZONE", "UTC")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingError(
            f"$PPB_NIGHTLY_TIMEZONE={timezone!r}: not an IANA time zone (e.g. UTC, Europe/Paris)"
        ) from None
    try:
        dg.AutomationCondition.cron_tick_passed(cron, timezone)
    except Exception:  # Dagster's check error: the cron string it cannot read
        raise SettingError(f"$PPB_NIGHTLY_CRON={cron!r}: not a cron schedule (e.g. '0 2 * * *')") from None
    return cron, timezone


def _interval_s() -> int:
    text = _setting("PPB_SENSOR_INTERVAL_S", "30")
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise SettingError(f"$PPB_SENSOR_INTERVAL_S={text!r}: expected a positive whole number of seconds")
    return seconds


NIGHTLY_CRON, NIGHTLY_TIMEZONE = _nightly()
# How often the sensors look: the run config files, and the automation condition.
SENSOR_INTERVAL_S = _interval_s()


def rebuild_when_changed(cron: str = NIGHTLY_CRON, timezone: str = NIGHTLY_TIMEZONE) -> dg.AutomationCondition:
    """The stage assets' condition (the module docstring says it in words)."""
    inputs_changed = dg.AutomationCondition.any_deps_updated().since_last_handled().with_label("an input changed")
    stale_tonight = (
        dg.AutomationCondition.cron_tick_passed(cron, timezone)
        & (dg.AutomationCondition.missing() | dg.AutomationCondition.code_version_changed().since_last_handled())
    ).with_label(f"nightly ({cron}, {timezone}): missing or new code")
    # A file not yet observed has no data version, which is not a missing input: run_config reads it.
    inputs_missing = dg.AutomationCondition.any_deps_missing().ignore(dg.AssetSelection.assets(CONFIG_FILE))
    return (
        (inputs_changed | stale_tonight)
        & ~inputs_missing
        & ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("rebuild when changed")


automation_sensor = dg.AutomationConditionSensorDefinition(
    "ppb_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    description="Requests the stage assets whose inputs changed, and at the nightly tick the stale ones.",
)
