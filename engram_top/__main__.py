import sys

from engram_top.cli.start import main

sys.exit(main())
