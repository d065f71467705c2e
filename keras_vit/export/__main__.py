"""`python -m keras_vit.export`: the export command line (see `cli`)."""

import sys

from keras_vit.export.cli import main

sys.exit(main())
