# lib/group/ keeps its algorithms and roster and leaves sockets, polling,
# mappings and waiting to the shared layers (net/, shm/ and its bell,
# os/): a system call or header of that kind in lib/group fails this
# test, naming it. It reaches the backends' meshes through their
# descriptors only (link/descriptor.hpp), as pairs do: including a
# tcp or rdma backend's own header fails it too.
file(GLOB sources "${SRC}/lib/group/*.cpp" "${SRC}/lib/group/*.hpp")
set(banned_calls "socket|socketpair|poll|ppoll|epoll_[a-z]+|select|accept4?|bind|listen|connect|send|sendmsg|recv|recvmsg|mmap|munmap|shm_open|shm_unlink|ftruncate|futex|wait_on_word|wake_word|sched_yield|nanosleep|usleep|_mm_pause")
set(banned_backends "link/(tcp|rdma)/")
set(banned_headers "sys/socket\\.h|poll\\.h|sys/epoll\\.h|sys/mman\\.h|netinet/[a-z]+\\.h|arpa/inet\\.h|netdb\\.h|linux/futex\\.h|sys/select\\.h")
set(found "")
foreach(f ${sources})
  file(STRINGS "${f}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(REGEX REPLACE "//.*$" "" code "${line}")
    # Group's own listen(Error &) and connect(Error &) are not the calls.
    string(REGEX REPLACE "(listen|connect)\\((Error &)?err\\)" "" code "${code}")
    # A call of the bare or ::-qualified name (a member such as words_->poll is not one).
    if(code MATCHES "(^|[^A-Za-z0-9_>.:]|[^:]::)(${banned_calls})[ ]*\\(" OR
       code MATCHES "#include <(${banned_headers})>" OR
       code MATCHES "#include \"${banned_backends}")
      file(RELATIVE_PATH rel "${SRC}" "${f}")
      string(APPEND found "  ${rel}:${n}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "lib/group/ does its own socket, poll, mmap or wait work, or reaches a backend "
          "around its descriptor; use net/, shm/, os/ or link/descriptor.hpp:\n${found}")
endif()
list(LENGTH sources count)
message(STATUS "lib/group/: ${count} files, no socket, poll, mmap or wait of its own, no backend header")
