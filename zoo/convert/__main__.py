"""The old name of the convert command, which writes a recipe checkpoint and
so lives with the recipes now: says so in one line."""

import sys

if __name__ == '__main__':
  sys.exit('error: the convert command moved: run python -m recipes.convert '
           'with the same arguments (see python -m recipes.convert --help).')
