import sys

from engram_top.cli.commands import main

sys.exit(main())
