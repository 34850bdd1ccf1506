"""The processes student code runs in: the bubblewrap sandbox and its kernelspec
(:mod:`.sandbox`, :mod:`.bwrap`), the guard inside a kernel (:mod:`.kernel_guard`), cgroups
(:mod:`.cgroups`), warm kernels forked from a zygote (:mod:`.warm`, :mod:`.zygote`), and the clean
room where code questions' graded calls run (:mod:`.cleanroom` on the worker; :mod:`.cleanroom_box`
and :mod:`.cleanroom_seal` inside its sandbox, started by :mod:`.cleanroom_launch`); the names they
share (:mod:`.names`)."""
