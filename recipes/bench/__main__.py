from recipes.bench import main
from recipes.runtime import startup

startup.loaded()
main()
