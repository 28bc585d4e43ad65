# expect: reject pointer-compare
# env: xdp
# kernel: skip the privileged kernel allows any comparison of a pointer with a number
# `ptr s< 0` would reveal the top bit of a host address: only == 0 / != 0 are null checks.
mov %r0, 0
jslt %r10, 0, out
mov %r0, 1
out:
exit
