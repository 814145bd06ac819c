import sys

from fedlangevin.cli import main

sys.exit(main())
