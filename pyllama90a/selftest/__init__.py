"""`python -m pyllama90a.selftest`: does every attention path of this build compute what it should, and how fast is it?

For MI210 (gfx90a) owners first, and for every other backend: checks each attention path (FA on/off, the quantized
K and V paths of our patches, their switched-off variants, CK if built) against a CPU reference on small synthetic
GQA shapes, then runs the seeds' speed comparison (FA on/off x f16/q8_0/q4_0 at several depths), and prints one
markdown report to paste into a bug report. Exit status 1 if any path fails.

Modules:
    __main__: the command line and the report
    paths: attention paths checked against a CPU reference
    cpu_side: the CPU side (references, the CPU's own paths) in a process that sees no GPU
    environment: what to tell a maintainer about the machine and the build
"""
