# expect: reject infinite-loop
# env: xdp
# review finding (expected to FAIL until fixed): a may_goto whose target is a loop that re-enters
# it; after 2^23 falls through it jumps forever.
mov %r0, 0
top:
may_goto top
ja top
