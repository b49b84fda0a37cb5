"""Humans in 3D (layer 2): the lifting rule (`lifting`), the `sapiens2-pose-3d` pipeline (`pipeline`) and the files
and 3D tracks made from its results (`outputs`)."""
