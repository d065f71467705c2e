"""Runs `keras_vit.analysis.cli.main`: `python -m keras_vit.analysis --help`."""

import sys

from keras_vit.analysis.cli import main

sys.exit(main())
