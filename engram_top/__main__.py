import sys

from engram_top.cli import main

sys.exit(main())
