"""`python -m pipelines RUN_CONFIG...` (see pipelines/materialize.py)."""

import sys

from pipelines.materialize import main

sys.exit(main())
