import sys

from preemptscope.cli import main

sys.exit(main())
