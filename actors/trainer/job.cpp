// train_data_parallel (trainer.hpp): the job's setup in this process (its process link and
// trainer actors) and its monitor, a scoped actor on the caller's thread that relays progress
// and epoch summaries and collects the replicas' reports. Each trainer actor is detached:
// forward, backward and the optimizer step block its own thread, the replica's one compute
// thread (replica_run.hpp).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "actors/trainer.hpp"
#include "actors/trainer/process_link.hpp"
#include "actors/trainer/replica_run.hpp"
#include "actors/trainer_messages.hpp"
#include "base/env.hpp"
#include "base/parse.hpp"
#include "core/cuda_memory.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/atomic_write.hpp"
#include "core/trace.hpp"

namespace actorch::actors {

namespace {

// Note [Restarts across nodes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A restarted job resumes from `checkpoint`, which rank 0 writes. Across nodes without a shared
// output folder the other nodes have no such file (or one left from another run), and a rank that
// starts at epoch 0 beside a rank 0 at epoch 442 trains on misaligned, silently. So after a
// restart the processes agree on rank 0's resume point before any replica is made: rank 0 says
// whether it has a checkpoint and how long it is, and broadcasts its bytes; a process whose file
// differs (or is missing) writes rank 0's in its place, atomically, and every process resumes
// from the same bytes. If rank 0 has none, all start afresh, as rank 0 does.
std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ACTORCH_CHECK(in, "train_data_parallel: cannot read the checkpoint ", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// See Note [Restarts across nodes]: spec.resume after it, the same on every process. `dev`: where
/// the group's tensors live (replica 0's GPU for an nccl group).
std::string agree_on_resume(dist::process_group& group, int rank, const std::string& path,
                            const actorch::device& dev) {
  std::string mine;
  if (rank == 0 && std::filesystem::exists(path))
    mine = read_whole(path);
  tensor size = as_tensor(
      std::vector<double>{rank == 0 && !mine.empty() ? double(mine.size()) : -1.0}, {1}, {});
  size = size.to(dev);
  group.broadcast(size, 0).wait();
  const double n = size.to(kCPU).data_ptr<double>()[0];
  if (n < 0) {
    if (rank != 0 && std::filesystem::exists(path))
      std::fprintf(stderr,
                   "train_data_parallel: process %d: rank 0 has no checkpoint at %s, so this "
                   "restart starts afresh as rank 0 does (the file here is not used)\n",
                   rank, path.c_str());
    return {};
  }
  tensor bytes = empty({int64_t(n)}, {.dtype = dtype::uint8});
  if (rank == 0)
    std::copy(mine.begin(), mine.end(), static_cast<char*>(bytes.data_ptr()));
  bytes = bytes.to(dev);
  group.broadcast(bytes, 0).wait();
  bytes = bytes.to(kCPU);
  if (rank != 0) {
    const std::string_view theirs(static_cast<const char*>(bytes.data_ptr()), size_t(n));
    const bool here = std::filesystem::exists(path);
    if (!here || read_whole(path) != theirs) {
      write_file_atomically(path, theirs, "train_data_parallel");
      std::fprintf(stderr,
                   "train_data_parallel: process %d: %s was %s; wrote rank 0's checkpoint (%lld "
                   "bytes) there to resume from it\n",
                   rank, path.c_str(), here ? "another checkpoint than rank 0's" : "missing",
                   static_cast<long long>(n));
    }
  }
  return path;
}

void check_spec(const trainer_spec& spec, const job_options& opts) {
  ACTORCH_CHECK(spec.make_model && spec.make_optimizer && spec.forward,
                "train_data_parallel: the spec needs make_model, make_optimizer and forward");
  ACTORCH_CHECK((spec.dataset != nullptr) != bool(spec.batch_fn),
                "train_data_parallel: give the spec either a dataset or a batch_fn (not both)");
  ACTORCH_CHECK(!spec.batch_fn || spec.steps_per_epoch > 0,
                "train_data_parallel: batch_fn needs steps_per_epoch > 0 but got ",
                spec.steps_per_epoch);
  ACTORCH_CHECK(spec.loader.sampler == nullptr && spec.loader.batch_sampler == nullptr,
                "train_data_parallel: loader.sampler and loader.batch_sampler must be unset: each "
                "replica samples its shard through a DistributedSampler (set loader.shuffle)");
  ACTORCH_CHECK(spec.loader.generator == nullptr,
                "train_data_parallel: loader.generator must be unset: each replica seeds its own "
                "from spec.seed (one generator shared by replicas would make runs differ)");
  ACTORCH_CHECK(spec.epochs >= 0, "train_data_parallel: epochs must be >= 0 but got ", spec.epochs);
  ACTORCH_CHECK(spec.checkpoint_every >= 0,
                "train_data_parallel: checkpoint_every must be >= 0 but got ",
                spec.checkpoint_every);
  ACTORCH_CHECK(opts.num_local >= 1, "train_data_parallel: num_local must be >= 1 but got ",
                opts.num_local);
  if (spec.device.is_cuda()) {
    ACTORCH_CHECK(!opts.process_group || opts.process_group->collective_device().is_cuda(),
                  "train_data_parallel: replicas on ", spec.device,
                  " need an nccl process group, but the job's is ", opts.process_group->backend());
    const std::string problem = cuda_device_problem(spec.device.index);
    ACTORCH_CHECK(problem.empty(), "train_data_parallel: replicas on ", spec.device,
                  " need that GPU: ", problem);
    ACTORCH_CHECK(!opts.process_group || opts.process_group->collective_device() == spec.device,
                  "train_data_parallel: this process's replica 0 trains on ", spec.device,
                  " but its nccl process group runs on ", opts.process_group->collective_device(),
                  "; make the group on ", spec.device);
  }
}

// trainer_spec::device: local replica i on cuda:((index + i) mod the GPU count).
std::vector<device> replica_devices(const device& d, int num_local) {
  std::vector<device> out(size_t(num_local), d);
  if (d.is_cuda())
    for (int i = 0; i < num_local; ++i)
      out[size_t(i)].index = (d.index + i) % cuda::device_count();
  return out;
}

// Each process writes its part; process 0 merges them once all are written (same host: the
// parts sit next to the target).
void write_trace(const std::string& path, dist::process_group* pg) {
  trace::enable(false);
  const int rank = pg ? pg->rank() : 0;
  const std::string part = pg ? path + ".part" + std::to_string(rank) : path;
  trace::write_chrome_json(part, rank, "process " + std::to_string(rank));
  if (!pg)
    return;
  pg->barrier().wait();
  if (rank == 0) {
    std::vector<std::string> parts;
    for (int r = 0; r < pg->size(); ++r)
      parts.push_back(path + ".part" + std::to_string(r));
    trace::merge_chrome_json(parts, path);
    for (const auto& p : parts)
      std::remove(p.c_str());
  }
  pg->barrier().wait();
}

caf::behavior trainer_actor(caf::event_based_actor* self, const trainer_spec* spec,
                            replica_info info, process_link* link, caf::actor monitor) {
  return {
      [=](train_atom) {
        replica_report report;
        try {
          report = replica_run(*spec, info, *link, self, monitor).run();
        } catch (const std::exception& e) {
          report.error = e.what();
        }
        report.rank = info.rank;
        report.local_rank = info.local_rank;
        self->send(monitor, done_atom::value, std::move(report));
        self->quit();
      },
  };
}

} // namespace

job_report train_data_parallel(const trainer_spec& given, const job_options& opts) {
  check_spec(given, opts);
  trainer_spec spec = given;
  const int64_t restart = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  bool resumes_on_its_own = restart > 0 && spec.resume.empty() && !spec.checkpoint.empty() &&
                            std::filesystem::exists(spec.checkpoint);
  if (resumes_on_its_own)
    spec.resume = spec.checkpoint; // see trainer_spec::resume
  if (!opts.trace.empty()) {
    trace::clear();
    trace::enable();
  }
  caf::actor_system_config cfg;
  // The trainers are detached (their own threads, where their loaders' coordinators run too)
  // and so are the loaders' workers: the scheduler runs only the comm actor. The sharing policy's
  // workers sleep on a condition variable, where the default work-stealing workers poll for a while
  // after each message and take CPU time from the trainers' compute threads.
  cfg.set("scheduler.max-threads", size_t(2));
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  process_link link(sys, opts.process_group, opts.num_local,
                    replica_devices(spec.device, opts.num_local));
  if (link.elastic()) {
    ACTORCH_CHECK(opts.num_local == 1 && !spec.device.is_cuda() && spec.dataset != nullptr,
                  "train_data_parallel: an elastic job (actorch launch --elastic) heals one CPU "
                  "trainer actor per process over a dataset; ",
                  opts.num_local, " actors per process on ", spec.device,
                  " cannot regroup yet (Note [Elastic healing])");
    ACTORCH_CHECK(spec.resume.empty(),
                  "train_data_parallel: an elastic job starts afresh: it "
                  "does not resume from a checkpoint (",
                  spec.resume, ") yet");
  }
  // Note [Sharded step]
  // ~~~~~~~~~~~~~~~~~~~
  // The CPU trainer actors of a job of one process, or one per process
  // (Note [Sharded step across processes]).
  const bool in_process = opts.num_local > 1 && link.num_processes() == 1;
  const bool across = opts.num_local == 1 && link.num_processes() > 1;
  const bool shardable =
      (in_process || across) && !link.elastic() && !spec.device.is_cuda() && !spec.comm_hook;
  ACTORCH_CHECK(!spec.zero_redundancy.value_or(false) || shardable,
                "train_data_parallel: zero_redundancy = true shards the step over the trainer "
                "actors of a job of one process, or over processes of one actor each, on the "
                "CPU, without a comm_hook; this job has ",
                opts.num_local, " actors per process, ", link.num_processes(), " processes, ",
                spec.device.str(), spec.comm_hook ? ", a comm_hook" : "",
                link.elastic() ? ", elastic" : "");
  if (shardable && spec.zero_redundancy.value_or(true))
    link.set_sharded(in_process ? std::make_shared<sharded_step>(opts.num_local)
                                : std::make_shared<sharded_step>(link.group()));
  if (restart > 0 && given.resume.empty() && !spec.checkpoint.empty() && !link.elastic() &&
      link.num_processes() > 1) { // Note [Restarts across nodes]
    spec.resume = agree_on_resume(*link.group(), link.process_rank(), spec.checkpoint, spec.device);
    resumes_on_its_own = !spec.resume.empty();
  }
  if (resumes_on_its_own && link.process_rank() == 0)
    std::printf("train_data_parallel: restart %lld of the job: resuming from %s\n",
                static_cast<long long>(restart), spec.resume.c_str());
  caf::scoped_actor monitor{sys};
  std::vector<caf::actor> trainers;
  for (int i = 0; i < opts.num_local; ++i) {
    replica_info info;
    info.local_rank = i;
    info.num_local = opts.num_local;
    info.process_rank = link.process_rank();
    info.num_processes = link.num_processes();
    info.rank = info.process_rank * opts.num_local + i;
    info.world_size = opts.num_local * info.num_processes;
    auto t = sys.spawn<caf::detached>(trainer_actor, &spec, info, &link,
                                      caf::actor_cast<caf::actor>(monitor));
    monitor->monitor(t);
    monitor->send(t, train_atom::value);
    trainers.push_back(std::move(t));
  }
  job_report out;
  std::string failure;
  auto fail = [&](const std::string& msg) {
    if (failure.empty()) {
      failure = msg;
      // The other local replicas may be waiting for this one's part of a collective.
      link.abort(std::make_exception_ptr(error(msg)));
    }
  };
  size_t down = 0;
  std::vector<char> reported(size_t(opts.num_local), 0);
  while (down < trainers.size()) {
    monitor->receive(
        [&](progress_atom, const train_progress& p) {
          if (opts.on_progress)
            opts.on_progress(p);
        },
        [&](epoch_end_atom, const epoch_summary& s) {
          out.epochs.push_back(s);
          if (opts.on_epoch)
            opts.on_epoch(s);
        },
        [&](done_atom, replica_report& r) {
          reported[size_t(r.local_rank)] = 1;
          if (!r.error.empty())
            fail("train_data_parallel: replica " + std::to_string(r.rank) + " failed: " + r.error);
          if (r.local_rank == 0) {
            out.step_end_times = std::move(r.step_end_times);
            out.zero_redundancy = r.sharded;
          }
        },
        [&](const caf::down_msg& d) {
          ++down;
          for (size_t i = 0; i < trainers.size(); ++i)
            if (trainers[i].address() == d.source && !reported[i])
              fail("train_data_parallel: the trainer actor of replica " +
                   std::to_string(link.process_rank() * opts.num_local + int(i)) +
                   " stopped without finishing (" + sys.render(d.reason) + ")");
        });
  }
  ACTORCH_CHECK(failure.empty(), failure);
  out.process_rank = link.process_rank();
  out.num_processes = link.num_processes();
  if (!opts.trace.empty())
    write_trace(opts.trace, link.group().get());
  return out;
}

} // namespace actorch::actors
