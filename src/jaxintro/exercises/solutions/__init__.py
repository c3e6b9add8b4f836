"""Our reference solutions, one file per exercise, read as text (`catalog.Exercise.reference` and `.starter`).

A package only so that an install carries the files; nothing imports these modules.
"""
