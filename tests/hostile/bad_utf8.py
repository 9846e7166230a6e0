import sys
sys.stdout.buffer.write(b"caf\xe9 \xff\xfe\xc3\x28 broken\n")
sys.stdout.buffer.write(b"\x80\x81 more garbage without newline")
sys.stdout.buffer.write(b"\n---\nval_bpb: 1.0\n")
