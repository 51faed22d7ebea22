import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from badserver import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
