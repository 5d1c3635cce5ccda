"""``python -m stroboscope`` is the ``stroboscope`` command."""

from stroboscope.cli import main

raise SystemExit(main())
