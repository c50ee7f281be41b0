"""The facility file's columns: their names, both spellings, and finding them in a header.

The HHS file comes with two spellings of its column names (bulk CSV ``..._18-19_...``, ``80+``,
``ED``; API ``..._18_19_...``, ``80``, ``ed``): columns are matched by :func:`normalise_column`,
never by position.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import EventsError, UsageError

_ADULT_AGES = ("18-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70-79", "80+", "unknown")


def _facility_columns() -> tuple[str, ...]:
    """The 128 columns of the final facility file, bulk-CSV spelling, in file order."""
    avg_sum = (
        "total_beds", "all_adult_hospital_beds", "all_adult_hospital_inpatient_beds",
        "inpatient_beds_used", "all_adult_hospital_inpatient_bed_occupied",
        "inpatient_beds_used_covid",
        "total_adult_patients_hospitalized_confirmed_and_suspected_covid",
        "total_adult_patients_hospitalized_confirmed_covid",
        "total_pediatric_patients_hospitalized_confirmed_and_suspected_covid",
        "total_pediatric_patients_hospitalized_confirmed_covid", "inpatient_beds",
        "total_icu_beds", "total_staffed_adult_icu_beds", "icu_beds_used",
        "staffed_adult_icu_bed_occupancy",
        "staffed_icu_adult_patients_confirmed_and_suspected_covid",
        "staffed_icu_adult_patients_confirmed_covid",
        "total_patients_hospitalized_confirmed_influenza",
        "icu_patients_confirmed_influenza",
        "total_patients_hospitalized_confirmed_influenza_and_covid",
    )  # fmt: skip
    cols = [
        "hospital_pk", "collection_week", "state", "ccn", "hospital_name", "address", "city",
        "zip", "hospital_subtype", "fips_code", "is_metro_micro",
    ]  # fmt: skip
    for suffix in ("7_day_avg", "7_day_sum", "7_day_coverage"):
        cols += [f"{c}_{suffix}" for c in avg_sum]
    for kind in ("confirmed", "suspected"):
        cols.append(f"previous_day_admission_adult_covid_{kind}_7_day_sum")
        cols += [f"previous_day_admission_adult_covid_{kind}_{a}_7_day_sum" for a in _ADULT_AGES]
        cols.append(f"previous_day_admission_pediatric_covid_{kind}_7_day_sum")
        cols.append("previous_day_covid_ED_visits_7_day_sum" if kind == "confirmed" else
                    "previous_day_total_ED_visits_7_day_sum")  # fmt: skip
    cols += [
        "previous_day_admission_influenza_confirmed_7_day_sum", "geocoded_hospital_address",
        "hhs_ids", "previous_day_admission_adult_covid_confirmed_7_day_coverage",
        "previous_day_admission_pediatric_covid_confirmed_7_day_coverage",
        "previous_day_admission_adult_covid_suspected_7_day_coverage",
        "previous_day_admission_pediatric_covid_suspected_7_day_coverage",
        "previous_week_personnel_covid_vaccinated_doses_administered_7_day",
        "total_personnel_covid_vaccinated_doses_none_7_day",
        "total_personnel_covid_vaccinated_doses_one_7_day",
        "total_personnel_covid_vaccinated_doses_all_7_day",
        "previous_week_patients_covid_vaccinated_doses_one_7_day",
        "previous_week_patients_covid_vaccinated_doses_all_7_day", "is_corrected",
    ]  # fmt: skip
    for c in ("all_pediatric_inpatient_bed_occupied", "all_pediatric_inpatient_beds"):
        cols += [f"{c}_7_day_avg", f"{c}_7_day_coverage", f"{c}_7_day_sum"]
    cols += [
        f"previous_day_admission_pediatric_covid_confirmed_{a}_7_day_sum"
        for a in ("0_4", "12_17", "5_11", "unknown")
    ]
    for c in (
        "staffed_icu_pediatric_patients_confirmed_covid",
        "staffed_pediatric_icu_bed_occupancy",
        "total_staffed_pediatric_icu_beds",
    ):
        cols += [f"{c}_7_day_avg", f"{c}_7_day_coverage", f"{c}_7_day_sum"]
    return tuple(cols)


#: Header of the final facility file (128 columns, bulk-CSV spelling, file order).
HHS_COLUMNS: tuple[str, ...] = _facility_columns()

#: Count column sets: key -> (columns, description for the metadata).
COUNT_SETS: dict[str, tuple[tuple[str, ...], str]] = {
    "admissions": (
        (
            "previous_day_admission_adult_covid_confirmed_7_day_sum",
            "previous_day_admission_pediatric_covid_confirmed_7_day_sum",
        ),
        "new confirmed COVID-19 admissions (adult + pediatric) per week; each admission is "
        "counted once",
    ),
    "census": (
        (
            "total_adult_patients_hospitalized_confirmed_covid_7_day_sum",
            "total_pediatric_patients_hospitalized_confirmed_covid_7_day_sum",
        ),
        "sum over the week's days of hospitalised confirmed COVID-19 patients (patient-days): a "
        "patient staying several days or weeks is counted again -- the paper's double counting",
    ),
}
#: Identifier columns read besides the counts (``zip`` is optional).
ID_COLUMNS = ("hospital_pk", "collection_week", "fips_code", "zip")


def normalise_column(name: str) -> str:
    """The spelling-independent key of a column name.

    Lower case; ``+`` dropped; every run of other non-alphanumeric characters becomes one
    ``_``; no leading or trailing ``_``. Both spellings of a column give the same key, e.g.
    ``..._18-19_7_day_sum`` / ``..._18_19_7_day_sum`` and ``..._80+_...`` / ``..._80_...``.
    """
    text = name.strip().lstrip("\ufeff").lower().replace("+", "")
    return re.sub(r"[^0-9a-z]+", "_", text).strip("_")


def api_spelling(name: str) -> str:
    """The API (JSON / Socrata) spelling of a bulk-CSV column name (``18-19`` -> ``18_19``)."""
    return normalise_column(name)


def match_columns(path: Path, header: Sequence[str], wanted: Sequence[str]) -> dict[str, int]:
    """Position of each wanted column (normalised names), found by normalised name.

    Parameters
    ----------
    path
        The file the header is from (for messages).
    header
        Its column names, as written.
    wanted
        Normalised names (:func:`normalise_column`); ``zip`` may be absent.

    Returns
    -------
    dict
        Normalised name -> 0-based position in ``header``, for every wanted column found.

    Raises
    ------
    EventsError
        A wanted column is missing (the message suggests close names) or appears twice.
    UsageError
        Only count columns are missing (they came from the options).
    """
    keys = [normalise_column(h) for h in header]
    out: dict[str, int] = {}
    for name in wanted:
        hits = [i for i, k in enumerate(keys) if k == name]
        if len(hits) > 1:
            raise EventsError(
                f"{path}: column {name!r} appears {len(hits)} times (as "
                f"{', '.join(repr(header[i]) for i in hits)}); keep one"
            )
        if hits:
            out[name] = hits[0]
    missing = [w for w in wanted if w not in out and w != "zip"]
    if not missing:
        return out
    hints = []
    for m in missing:
        close = difflib.get_close_matches(m, keys, n=2, cutoff=0.75)
        hints.append(f"{m!r}" + (f" (closest: {', '.join(close)})" if close else ""))
    if any(m in ID_COLUMNS for m in missing):
        raise EventsError(
            f"{path}: missing column(s) {'; '.join(hints)}; the file has {len(header)} columns "
            f"starting {', '.join(header[:4])} -- is it the HHS 'COVID-19 Reported Patient "
            "Impact and Hospital Capacity by Facility' CSV?"
        )
    raise UsageError(
        f"{path}: no count column {'; '.join(hints)} (names are matched ignoring case and "
        "punctuation, e.g. 18-19 = 18_19); check --column"
    )
