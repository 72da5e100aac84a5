"""``python -m steplab_client`` is ``steplab``."""

import sys

from steplab_client.cli import main

sys.exit(main())
