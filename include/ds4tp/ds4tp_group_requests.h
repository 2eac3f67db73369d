/* libds4tp: split-phase group collectives (start, then test / wait).
 * Part of the public API: include <ds4tp/ds4tp.h>, which includes this. Experimental (ds4tp.h, "API stability"). */
#ifndef DS4TP_GROUP_REQUESTS_H
#define DS4TP_GROUP_REQUESTS_H
#ifndef DS4TP_H
#error "include <ds4tp/ds4tp.h> rather than this topic header"
#endif

/* ------------------------------------------------------------------ */
/* A start hands the collective to the group's progress thread (one per   */
/* group, made at the first start) and returns at once with a request;   */
/* the engine computes meanwhile and collects the result with            */
/* ds4tp_group_wait (or polls ds4tp_group_test). Several requests may be  */
/* in flight on one group: they run in the order they were started, and  */
/* a blocking collective on the group runs after every request started    */
/* before it (it waits for them first). Every rank must start the same    */
/* collectives in the same order, as with the blocking calls.            */
/*                                                                        */
/* Buffers, and the count and offset arrays' contents, belong to the      */
/* request until it completes (the arrays are copied at the start; the    */
/* buffers are not): do not touch them before ds4tp_group_wait returns    */
/* or ds4tp_group_test says done. Arguments are checked when the call     */
/* runs: a refusal is the request's status, and it does not fail the      */
/* group. A failure that fails the group fails every later request too,   */
/* each with DS4TP_EFAILED naming the first cause (one verdict).          */
/*                                                                        */
/* Threads: start, wait, test and the blocking calls from one thread at a */
/* time, as for every group call; a request may be waited on from any    */
/* thread. ds4tp_group_free with requests pending fails them (ESTATE)     */
/* and then returns; each request must still be freed. The GPU stream     */
/* service (ds4tp_group_stream_start) is refused while requests pend.    */

typedef struct ds4tp_group_request ds4tp_group_request;

/* Each start takes the blocking call's arguments (ds4tp_groups.h) and    */
/* *req, which gets the request (NULL on a refusal: g or req NULL, the    */
/* stream service running, out of memory); returns DS4TP_OK or that     */
/* refusal's status.                                                     */
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_reduce_start(ds4tp_group *g, void *buf, uint64_t count,
                                                        int dtype, int op,
                                                        ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather_start(ds4tp_group *g, const void *in, void *out,
                                                        uint64_t bytes, ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_broadcast_start(ds4tp_group *g, void *buf, uint64_t bytes,
                                                       int root, ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_barrier_start(ds4tp_group *g, ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_reduce_scatter_start(ds4tp_group *g, const void *in,
                                                            void *out, uint64_t count, int dtype,
                                                            int op, ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_reduce_start(ds4tp_group *g, void *buf, uint64_t count,
                                                    int dtype, int op, int root,
                                                    ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_gather_start(ds4tp_group *g, const void *in, void *out,
                                                    uint64_t bytes, int root,
                                                    ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_scatter_start(ds4tp_group *g, const void *in, void *out,
                                                     uint64_t bytes, int root,
                                                     ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather_v_start(ds4tp_group *g, const void *in,
                                                          void *out, const uint64_t *bytes,
                                                          ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_gather_rows_start(ds4tp_group *g, const void *in,
                                                             void *out, uint64_t rows,
                                                             uint64_t row_bytes,
                                                             ds4tp_group_request **req);
DS4TP_EXPERIMENTAL_API int ds4tp_group_all_to_all_v_start(
    ds4tp_group *g, const void *in, const uint64_t *send_bytes, const uint64_t *send_offsets,
    void *out, const uint64_t *recv_bytes, const uint64_t *recv_offsets,
    ds4tp_group_request **req);

/* *done = 1 once the request completed (its status is then the return   */
/* value), else 0 and DS4TP_OK. Never blocks. DS4TP_EINVAL for NULLs.     */
DS4TP_EXPERIMENTAL_API int ds4tp_group_test(ds4tp_group_request *req, int *done);
/* Blocks until the request completed; returns its status (its message:  */
/* ds4tp_group_request_errmsg and, on this thread, ds4tp_last_error).     */
DS4TP_EXPERIMENTAL_API int ds4tp_group_wait(ds4tp_group_request *req);
/* The completed request's message ("" on success or while it runs);     */
/* never NULL; valid until the request is freed.                          */
DS4TP_EXPERIMENTAL_API const char *ds4tp_group_request_errmsg(const ds4tp_group_request *req);
/* Waits for the request if it still runs, then frees it. NULL is fine.  */
DS4TP_EXPERIMENTAL_API void ds4tp_group_request_free(ds4tp_group_request *req);

#endif /* DS4TP_GROUP_REQUESTS_H */
