"""Reading fix_first.csv in tests: its dollar columns and rank as numbers (blank: NaN), every other blank as ``""``."""
import pandas as pd

#: fix_first.csv's dollar columns: each blank where its measure does not apply (issue 45: the idle and the wait
#: inside collectives in columns of their own).
USD_COLUMNS = ("idle_usd_per_month", "fix_wins_back_usd_per_month", "collective_wait_usd_per_month",
               "assumed_usd_per_month", "rank")   # rank: empty for an archived entry


def read_fixes(path) -> pd.DataFrame:
    """fix_first.csv at ``path``: blanks kept as ``""`` except in :data:`USD_COLUMNS` (NaN)."""
    return pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in USD_COLUMNS})
