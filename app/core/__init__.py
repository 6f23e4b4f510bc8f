"""One fact per module, below everything else: digests, atomic files and scratch folders, formats, ids, the naming rule, sizes, temp-file owners, the toolchain versions, the bounded JSON reader."""
