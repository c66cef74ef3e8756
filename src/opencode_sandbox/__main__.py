from opencode_sandbox.launcher import main

main()
