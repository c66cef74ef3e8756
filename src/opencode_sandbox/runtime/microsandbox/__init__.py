"""The microsandbox runtime: a libkrun microVM per project, driven through `msb`."""
