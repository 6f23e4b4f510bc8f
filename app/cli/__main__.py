"""`python -m app.cli` is `ane-kernels`."""

import sys

from app.cli import main

sys.exit(main())
