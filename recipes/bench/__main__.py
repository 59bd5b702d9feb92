from recipes.bench import main

main()
