// core/cuda/emu/graph.cpp — stream capture and CUDA Graphs: while a stream captures, the work
// queued on it (kernel launches, cudaMemcpyAsync, cudaMemsetAsync, cudaEventRecord, cuBLAS and
// cuBLASLt calls, graph launches) is recorded as owned closures instead of run; cudaStreamEndCapture
// makes the recorded list a graph, cudaGraphLaunch replays it in order through the same paths as
// direct calls. What CUDA forbids during a capture (unsafe calls by the capture mode, the legacy
// stream, synchronising a capturing stream or a captured event...) is refused with CUDA's error
// and invalidates the capture. README "Stream capture and graphs".
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/emu_runtime.h"

namespace {
struct GraphNode {
  const char* what;  // the call that recorded it ("cudaMemcpyAsync", a kernel's name...)
  cuemu::detail::GraphWork work;
};
using NodeList = std::vector<GraphNode>;
}  // namespace

// A graph and an executable graph share one immutable node list: an exec outlives its graph.
struct CUgraph_st {
  std::shared_ptr<const NodeList> nodes;
};
struct CUgraphExec_st {
  std::shared_ptr<const NodeList> nodes;
};

namespace cuemu::detail {

std::atomic<int> g_active_captures{0};
std::atomic<bool> g_fail_next_end{false};  // cuemu::fail_next_capture_end

namespace {

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
const char* mode_name(cudaStreamCaptureMode m) {
  switch (m) {
    case cudaStreamCaptureModeGlobal: return "cudaStreamCaptureModeGlobal";
    case cudaStreamCaptureModeThreadLocal: return "cudaStreamCaptureModeThreadLocal";
    case cudaStreamCaptureModeRelaxed: return "cudaStreamCaptureModeRelaxed";
  }
  return "an invalid cudaStreamCaptureMode";
}

// A stream that captures, or joined a capture through cudaStreamWaitEvent on a captured event.
struct Member {
  CUstream_st* stream;
  size_t last_work = 0;   // nodes in the capture after this stream's latest one (0: none yet)
  size_t joined_upto = 0;  // the latest seq of its events another member waited on
};
struct Capture {
  uint64_t id;
  cudaStreamCaptureMode mode;
  std::thread::id thread;  // the thread that began it
  std::vector<Member> members;  // members[0]: the stream it began on
  bool blocking = false;   // a member is a blocking stream: legacy-stream work would join it
  bool invalidated = false;
  std::string why;         // why it was invalidated
  std::shared_ptr<NodeList> nodes = std::make_shared<NodeList>();
  Member* member(CUstream_st* s) {
    for (Member& m : members)
      if (m.stream == s) return &m;
    return nullptr;
  }
};

std::mutex g_mu;  // captures, the streams' capture fields, graphs and execs
std::unordered_map<uint64_t, std::unique_ptr<Capture>> g_captures;
uint64_t g_capture_serial = 0;
std::set<const void*> g_graphs;  // live cudaGraph_t and cudaGraphExec_t
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;
thread_local CUstream_st t_per_thread_stream{cudaStreamDefault};

// The stream object behind a handle; nullptr for the legacy default stream.
CUstream_st* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy) return nullptr;
  if (s == cudaStreamPerThread) return &t_per_thread_stream;
  return s;
}
bool is_blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }
// Caller holds g_mu.
Capture* capture_of(const CUstream_st* s) {
  if (!s || s->capture == 0) return nullptr;
  auto it = g_captures.find(s->capture);
  return it == g_captures.end() ? nullptr : it->second.get();
}
Capture* capture_by_id(uint64_t id) {
  auto it = g_captures.find(id);
  return it == g_captures.end() ? nullptr : it->second.get();
}
std::string describe(const Capture& c) {
  return "the capture of stream " + hex(c.members[0].stream) + " (" + mode_name(c.mode) + ")";
}
void invalidate(Capture& c, const std::string& why) {
  if (c.invalidated) return;
  c.invalidated = true;
  c.why = why;
}
const char* kInvalidated = "; the capture is invalidated (cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated)";
// Invalidates every capture with a blocking stream (legacy-stream work would join it); "" if none.
std::string refuse_for_legacy(const char* fn) {
  std::string names;
  for (auto& [id, c] : g_captures) {
    if (!c->blocking) continue;
    names += (names.empty() ? "" : ", ") + describe(*c);
  }
  if (names.empty()) return "";
  const std::string why = std::string(fn) + " on the legacy default stream while a blocking stream captures (" +
                          names + "): the legacy stream would synchronise with it; queue the work on the capturing " +
                          "stream, or create the stream with cudaStreamNonBlocking";
  for (auto& [id, c] : g_captures)
    if (c->blocking) invalidate(*c, why);
  return why + kInvalidated;
}
// Ends capture c: its streams leave it. Caller holds g_mu.
std::unique_ptr<Capture> end_capture(Capture* c) {
  for (Member& m : c->members) m.stream->capture = 0;
  auto it = g_captures.find(c->id);
  std::unique_ptr<Capture> owned = std::move(it->second);
  g_captures.erase(it);
  g_active_captures.fetch_sub(1);
  return owned;
}

// Replays a node list on `stream`; stops at the first node that fails.
cudaError_t replay(const NodeList& nodes, cudaStream_t stream) {
  count_graph_launch();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const cudaError_t e = nodes[i].work(stream);
    if (e != cudaSuccess) {
      report("cudaGraphLaunch: node #" + std::to_string(i) + " (" + nodes[i].what + ") failed with " +
             cudaGetErrorName(e) + "; the rest of the graph was not run. " + cuemu::last_fault());
      return e;
    }
  }
  return cudaSuccess;
}

}  // namespace

Queued capture_queue(cudaStream_t stream, const char* fn, GraphWork work, cudaError_t* err, CaptureMark* mark) {
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  if (!s) {
    const std::string why = refuse_for_legacy(fn);
    if (why.empty()) return Queued::Run;
    lk.unlock();
    *err = reject(cudaErrorStreamCaptureImplicit, why);
    return Queued::Refused;
  }
  Capture* c = capture_of(s);
  if (!c) return Queued::Run;
  if (c->invalidated) {
    const std::string why = std::string(fn) + ": " + describe(*c) + " was invalidated earlier: " + c->why;
    lk.unlock();
    *err = reject(cudaErrorStreamCaptureInvalidated, why);
    return Queued::Refused;
  }
  c->nodes->push_back(GraphNode{fn, std::move(work)});
  c->member(s)->last_work = c->nodes->size();
  if (mark) *mark = CaptureMark{c->id, c->nodes->size()};
  count_captured_node();
  return Queued::Recorded;
}

bool stream_capturing(cudaStream_t stream) {
  std::lock_guard<std::mutex> lk(g_mu);
  return capture_of(resolve(stream)) != nullptr;
}

void capture_invalidate(cudaStream_t stream, const std::string& why) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (Capture* c = capture_of(resolve(stream))) invalidate(*c, why);
}

cudaError_t capture_refuse(cudaStream_t stream, cudaError_t code, const std::string& why) {
  capture_invalidate(stream, why);
  return reject(code, why + kInvalidated);
}

cudaError_t capture_unsafe_call(const char* fn) {
  std::unique_lock<std::mutex> lk(g_mu);
  if (t_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  std::string names;
  for (auto& [id, c] : g_captures) {
    const bool own = c->thread == me && c->mode != cudaStreamCaptureModeRelaxed;
    const bool other = t_mode == cudaStreamCaptureModeGlobal && c->thread != me && c->mode == cudaStreamCaptureModeGlobal;
    if (!own && !other) continue;
    names += (names.empty() ? "" : ", ") + describe(*c) + (own ? ", begun by this thread" : ", begun by another thread");
    invalidate(*c, std::string(fn) + " during the capture (a potentially unsafe call)");
  }
  if (names.empty()) return cudaSuccess;
  lk.unlock();
  return reject(cudaErrorStreamCaptureUnsupported,
                std::string(fn) + " while " + names + " is under way: a potentially unsafe call is prohibited by the " +
                    "capture mode (this thread's mode: " + mode_name(t_mode) + ")" + kInvalidated +
                    ". Allocate before capturing, or capture in cudaStreamCaptureModeRelaxed, or switch this thread "
                    "with cudaThreadExchangeStreamCaptureMode");
}

cudaError_t capture_sync_call(const char* fn) {
  if (cudaError_t e = capture_unsafe_call(fn); e != cudaSuccess) return e;
  cudaError_t err = cudaSuccess;
  return capture_queue(nullptr, fn, GraphWork(), &err) == Queued::Refused ? err : cudaSuccess;
}

cudaError_t capture_sync_stream(cudaStream_t stream, const char* fn) {
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  if (!s) {
    const std::string why = refuse_for_legacy(fn);
    if (why.empty()) return cudaSuccess;
    lk.unlock();
    return reject(cudaErrorStreamCaptureImplicit, why);
  }
  Capture* c = capture_of(s);
  if (!c) return cudaSuccess;
  const std::string why = std::string(fn) + " of stream " + hex(stream) + " while it captures (" + describe(*c) +
                          "): its work is being recorded, not run, so there is nothing to wait for";
  invalidate(*c, why);
  lk.unlock();
  return reject(cudaErrorStreamCaptureUnsupported, why + kInvalidated);
}

cudaError_t capture_sync_device(const char* fn) {
  std::unique_lock<std::mutex> lk(g_mu);
  std::string names;
  for (auto& [id, c] : g_captures) names += (names.empty() ? "" : ", ") + describe(*c);
  if (names.empty()) return cudaSuccess;
  const std::string why = std::string(fn) + " while a stream captures (" + names + ")";
  for (auto& [id, c] : g_captures) invalidate(*c, why);
  lk.unlock();
  return reject(cudaErrorStreamCaptureUnsupported, why + kInvalidated);
}

cudaError_t capture_sync_event(uint64_t event_capture, const char* fn) {
  std::unique_lock<std::mutex> lk(g_mu);
  Capture* c = event_capture ? capture_by_id(event_capture) : nullptr;
  if (!c) return cudaSuccess;
  const std::string why = std::string(fn) + " of an event last recorded into " + describe(*c) +
                          ", which is still capturing: the event will complete only when the graph runs";
  invalidate(*c, why);
  lk.unlock();
  return reject(cudaErrorCapturedEvent, why + kInvalidated);
}

cudaError_t capture_wait_event(cudaStream_t stream, bool recorded, const CaptureMark& mark, cudaStream_t event_stream,
                               unsigned flags) {
  const char* fn = "cudaStreamWaitEvent";
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  Capture* ec = mark.capture ? capture_by_id(mark.capture) : nullptr;  // the event's capture, if still on
  Capture* sc = capture_of(s);
  if (!s) {
    std::string why = refuse_for_legacy(fn);
    if (why.empty() && !ec) return cudaSuccess;
    if (why.empty()) {
      why = std::string(fn) + ": the legacy default stream cannot join " + describe(*ec);
      invalidate(*ec, why);
      why += kInvalidated;
    }
    lk.unlock();
    return reject(cudaErrorStreamCaptureImplicit, why);
  }
  std::string why;
  cudaError_t code = cudaSuccess;
  if (!sc) {
    if (!ec) return cudaSuccess;  // nothing captures here
    if (ec->invalidated) return cudaSuccess;  // its EndCapture reports it
    // A fork: this stream joins the capture; what it queues from now on is recorded there.
    s->capture = ec->id;
    ec->members.push_back(Member{s});
    ec->blocking = ec->blocking || is_blocking(s);
    return cudaSuccess;
  }
  if (sc->invalidated) {
    why = std::string(fn) + ": " + describe(*sc) + " was invalidated earlier: " + sc->why;
    lk.unlock();
    return reject(cudaErrorStreamCaptureInvalidated, why);
  }
  if ((flags & cudaEventWaitExternal) || !recorded) return cudaSuccess;  // no dependency inside the graph
  if (ec == sc) {  // a join: the event's stream's work up to the record is ordered before this stream's
    if (Member* m = sc->member(resolve(event_stream))) m->joined_upto = std::max(m->joined_upto, mark.seq);
    return cudaSuccess;
  }
  if (!ec) {
    code = cudaErrorStreamCaptureIsolation;
    why = std::string(fn) + ": stream " + hex(stream) + " (in " + describe(*sc) +
          ") waits on an event recorded outside the capture: a dependency on uncaptured work (pass "
          "cudaEventWaitExternal if that is meant)";
  } else {
    code = cudaErrorStreamCaptureMerge;
    why = std::string(fn) + ": stream " + hex(stream) + " (in " + describe(*sc) + ") waits on an event recorded into " +
          describe(*ec) + ": two capture sequences cannot merge";
    invalidate(*ec, why);
  }
  invalidate(*sc, why);
  lk.unlock();
  return reject(code, why + kInvalidated);
}

cudaError_t capture_stream_destroy(cudaStream_t stream) {
  std::unique_lock<std::mutex> lk(g_mu);
  Capture* c = capture_of(resolve(stream));
  if (!c) return cudaSuccess;
  const std::string why = "cudaStreamDestroy(" + hex(stream) + ") while the stream captures (" + describe(*c) +
                          "); end the capture first";
  invalidate(*c, why);
  lk.unlock();
  return reject(cudaErrorIllegalState, why + kInvalidated);
}

}  // namespace cuemu::detail

// ======================= the CUDA runtime API =======================
using namespace cuemu::detail;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  const char* fn = "cudaStreamBeginCapture";
  if ((int)mode < 0 || (int)mode > 2)
    return reject(cudaErrorInvalidValue, std::string(fn) + ": mode " + std::to_string((int)mode) +
                                             " is not a cudaStreamCaptureMode (0 Global, 1 ThreadLocal, 2 Relaxed)");
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, std::string(fn) + ": unknown stream");
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  if (!s) {
    lk.unlock();
    return reject(cudaErrorStreamCaptureUnsupported,
                  std::string(fn) + ": the legacy default stream cannot be captured; capture a created stream");
  }
  if (Capture* c = capture_of(s)) {
    const std::string why = std::string(fn) + " on stream " + hex(stream) + ", which already captures (" +
                            describe(*c) + ")";
    invalidate(*c, why);
    lk.unlock();
    return reject(cudaErrorIllegalState, why + kInvalidated);
  }
  auto c = std::make_unique<Capture>();
  c->id = ++g_capture_serial;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->members.push_back(Member{s});
  c->blocking = is_blocking(s);
  s->capture = c->id;
  g_captures[c->id] = std::move(c);
  g_active_captures.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  const char* fn = "cudaStreamEndCapture";
  if (!pGraph) return reject(cudaErrorInvalidValue, std::string(fn) + ": null graph pointer");
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, std::string(fn) + ": unknown stream");
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  Capture* c = capture_of(s);
  if (!c) {
    lk.unlock();
    return reject(cudaErrorIllegalState, std::string(fn) + ": stream " + hex(stream) + " is not capturing");
  }
  std::string why;
  cudaError_t code = cudaSuccess;
  if (c->mode != cudaStreamCaptureModeRelaxed && std::this_thread::get_id() != c->thread) {
    why = std::string(fn) + " from a thread other than the one that began " + describe(*c) +
          " (only cudaStreamCaptureModeRelaxed captures may end on another thread)";
    invalidate(*c, why);
    lk.unlock();
    return reject(cudaErrorStreamCaptureWrongThread, why + kInvalidated);
  }
  if (c->members[0].stream != s) {
    why = std::string(fn) + " on stream " + hex(stream) + ", which joined " + describe(*c) +
          ": end a capture on the stream that began it";
    invalidate(*c, why);
    lk.unlock();
    return reject(cudaErrorStreamCaptureUnmatched, why + kInvalidated);
  }
  if (g_fail_next_end.exchange(false))
    invalidate(*c, "a failure planted by cuemu::fail_next_capture_end (as an unrecordable call would)");
  if (c->invalidated) {
    code = cudaErrorStreamCaptureInvalidated;
    why = std::string(fn) + ": " + describe(*c) + " was invalidated: " + c->why + "; no graph";
  }
  for (size_t i = 1; i < c->members.size() && code == cudaSuccess; ++i) {
    const Member& m = c->members[i];
    if (m.last_work > m.joined_upto) {
      code = cudaErrorStreamCaptureUnjoined;
      why = std::string(fn) + ": stream " + hex(m.stream) + " joined " + describe(*c) +
            " and queued work that no stream of the capture waited for (record an event on it after its work and "
            "cudaStreamWaitEvent on it from the capturing stream); no graph";
    }
  }
  std::unique_ptr<Capture> done = end_capture(c);
  *pGraph = nullptr;
  if (code != cudaSuccess) {
    lk.unlock();
    return reject(code, why);
  }
  *pGraph = new CUgraph_st{std::move(done->nodes)};
  g_graphs.insert(*pGraph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const char* fn = "cudaStreamIsCapturing";
  if (!status) return reject(cudaErrorInvalidValue, std::string(fn) + ": null status pointer");
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, std::string(fn) + ": unknown stream");
  std::unique_lock<std::mutex> lk(g_mu);
  CUstream_st* s = resolve(stream);
  *status = cudaStreamCaptureStatusNone;
  if (!s) {
    for (auto& [id, c] : g_captures) {
      if (!c->blocking) continue;
      const std::string why = std::string(fn) + " of the legacy default stream while " + describe(*c) +
                              " (a blocking stream) is under way";
      lk.unlock();
      return reject(cudaErrorStreamCaptureImplicit, why);
    }
    return cudaSuccess;
  }
  if (Capture* c = capture_of(s))
    *status = c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return reject(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: null mode pointer");
  if ((int)*mode < 0 || (int)*mode > 2)
    return reject(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: " + std::to_string((int)*mode) +
                                             " is not a cudaStreamCaptureMode (0 Global, 1 ThreadLocal, 2 Relaxed)");
  std::swap(*mode, t_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  const char* fn = "cudaGraphInstantiate";
  if (!pGraphExec) return reject(cudaErrorInvalidValue, std::string(fn) + ": null exec pointer");
  // AutoFreeOnLaunch and UseNodePriority change nothing here (no memory nodes, no priorities).
  const unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if (flags & ~known)
    return reject(cudaErrorInvalidValue, std::string(fn) + ": flags " + std::to_string(flags) +
                                             " (only 0, cudaGraphInstantiateFlagAutoFreeOnLaunch and "
                                             "cudaGraphInstantiateFlagUseNodePriority are emulated)");
  std::unique_lock<std::mutex> lk(g_mu);
  if (!graph || !g_graphs.count(graph)) {
    lk.unlock();
    return reject(cudaErrorInvalidValue, std::string(fn) + ": " + hex(graph) + " is not a live cudaGraph_t");
  }
  *pGraphExec = new CUgraphExec_st{graph->nodes};
  g_graphs.insert(*pGraphExec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  const char* fn = "cudaGraphLaunch";
  std::shared_ptr<const NodeList> nodes;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (exec && g_graphs.count(exec)) nodes = exec->nodes;
  }
  if (!nodes) return reject(cudaErrorInvalidValue, std::string(fn) + ": " + hex(exec) + " is not a live cudaGraphExec_t");
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, std::string(fn) + ": unknown stream");
  if (cudaError_t e = sticky_error(); e != cudaSuccess) {
    set_last_error(e);
    return e;
  }
  if (capture_active()) {  // a graph launched into a capturing stream becomes one node of that capture
    cudaError_t ret;
    if (capture_takes(stream, fn, [nodes](cudaStream_t s) { return replay(*nodes, s); }, &ret)) return ret;
  }
  return replay(*nodes, stream);
}

namespace {
template <class H>
cudaError_t destroy_handle(const char* fn, H* h) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!h || !g_graphs.erase(h)) h = nullptr;
  }
  if (!h) return reject(cudaErrorInvalidValue, std::string(fn) + ": not a live handle");
  delete h;
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return destroy_handle("cudaGraphExecDestroy", exec); }
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return destroy_handle("cudaGraphDestroy", graph); }

void cuemu::fail_next_capture_end() { cuemu::detail::g_fail_next_end = true; }
