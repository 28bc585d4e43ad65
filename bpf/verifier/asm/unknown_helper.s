# expect: reject unknown-helper
# env: xdp
call 999
mov %r0, 0
exit
