"""`python -m specwatch.engine [SGLang launch_server flags]`: run the built-in engine."""

import sys

from specwatch.engine.server import main

if __name__ == "__main__":
    sys.exit(main())
