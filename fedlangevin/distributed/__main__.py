"""``python -m fedlangevin.distributed`` / ``torchrun ... -m fedlangevin.distributed``: see
:mod:`fedlangevin.distributed.cli`."""

import sys

from fedlangevin.distributed.cli import main

sys.exit(main())
