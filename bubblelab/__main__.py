from bubblelab.cli import main

main()
