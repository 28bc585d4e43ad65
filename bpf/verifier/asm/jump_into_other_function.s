# expect: reject bad-cfg
# env: xdp
mov %r0, 0
call local f
ja g
f:
mov %r0, 1
g:
exit
