"""`python -m pipelines RUN_CONFIG...` (see pipelines/materialize.py)."""

import sys

from pipelines.resources import SettingError

try:
    from pipelines.materialize import main
except SettingError as err:  # a PPB_* setting the definitions refuse as they load
    print(f"python -m pipelines: error: {err}", file=sys.stderr)
    sys.exit(2)

sys.exit(main())
