// `actorch bench report`: the standard workloads and their PyTorch peers, run alternately for
// several rounds in one session, summarised as medians and ratios in a Markdown table and drawn
// (gnuplot) as how each cost grows with size. See Note [Benchmark report].
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "base/error.hpp"
#include "bench/bench.hpp"

namespace actorch::bench {

// Note [Benchmark report]
// These machines are shared and noisy, so a figure means something only next to its peer's
// from the same minutes. Each round runs every workload once, ours and the peer back to back
// (which goes first alternates by round), and the report takes per-key medians over the rounds.
// Every benchmark prints `name key=value ...` lines (WORKLOADS.md); a line's key is its name
// and the keys that say what was measured (mode, world, workers, bytes, ...), never the
// measured values, so that one key collects the same measurement across rounds. The table
// puts each of our medians next to the peer's and divides them so that a ratio above 1 always
// means actorch is faster; the data-parallel rows also divide by actorch's own world-1 step,
// the limit the issue holds them to.
namespace {

// ddp-mlp's default width: its lines name hidden and depth only for other models.
const int kHidden = int(ddp_mlp_options{}.hidden);

struct line {
  std::string name;
  std::map<std::string, std::string> kv;
};

// The keys that identify a measurement (the rest are its values).
const std::array<const char*, 12> kIdentity = {"op",    "mode",    "world",  "hidden",
                                               "depth", "workers", "passes", "threads",
                                               "bytes", "n",       "which",  "backend"};

std::string key_of(const line& l) {
  std::string k = l.name;
  for (const char* id : kIdentity) {
    // Only `coll` and torch's DDP lines share a name and differ by backend alone.
    if (std::string_view(id) == "backend" && l.name != "coll" && l.name != "torch-ddp-mlp")
      continue;
    if (auto it = l.kv.find(id); it != l.kv.end())
      k += " " + it->first + "=" + it->second;
  }
  return k;
}

std::vector<line> parse(const std::string& text) {
  std::vector<line> out;
  std::istringstream in(text);
  std::string row;
  while (std::getline(in, row)) {
    std::istringstream words(row);
    line l;
    words >> l.name;
    std::string w;
    bool ok = !l.name.empty();
    while (ok && words >> w) {
      const auto eq = w.find('=');
      ok = eq != std::string::npos && eq > 0;
      if (ok)
        l.kv[w.substr(0, eq)] = w.substr(eq + 1);
    }
    if (ok && !l.kv.empty())
      out.push_back(std::move(l));
  }
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `cmd` through the shell; its output (stdout and stderr), or an error naming the command
// and the end of what it printed.
std::string run(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  ACTORCH_CHECK(p != nullptr, "bench report: cannot run ", cmd);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
    out.append(buf.data(), n);
  const int status = ::pclose(p);
  ACTORCH_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench report: `",
                cmd, "` failed (status ", status,
                "); it printed: ", out.substr(out.size() > 2000 ? out.size() - 2000 : 0));
  return out;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  ACTORCH_CHECK(!ec, "bench report: cannot find its own executable: ", ec.message());
  return p.string();
}

// One workload of a round: our command and, where there is one, the peer's.
struct job {
  std::string ours;
  std::string peer; // empty: no peer
  // Run with `ours` alternately, `repeat` times per round (the loader's short P=20 epoch
  // against the plain loop's, which only many interleaved pairs compare).
  std::string partner{};
  int repeat = 1;
  // Non-empty: the backend `ours`'s lines are filed under (torch's peer scripts over actorch's
  // torch.distributed backend print backend=actorch, as our own collectives do).
  std::string backend_label{};
};

// `text` with each line's backend=actorch written backend=<label>.
std::string relabel(const std::string& text, const std::string& label) {
  std::string out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (const auto at = l.find(" backend=actorch");
        at != std::string::npos && (at + 16 == l.size() || l[at + 16] == ' '))
      l.replace(at + 9, 7, label);
    out += l + "\n";
  }
  return out;
}

struct medians {
  std::map<std::string, std::vector<double>> seen; // key/metric -> one value per round

  void add(const std::vector<line>& lines) {
    for (const line& l : lines)
      for (const char* metric :
           {"ms_per_step", "samples_per_s", "time_us", "gflops", "gbps", "busbw_GBps", "rate",
            "first_batch_s", "cpu_s_per_image", "rss_mb"})
        if (auto it = l.kv.find(metric); it != l.kv.end())
          seen[key_of(l) + " " + metric].push_back(std::strtod(it->second.c_str(), nullptr));
  }
  // The median of `key`'s `metric`, or a negative number when it was never measured.
  double get(const std::string& key, const std::string& metric) const {
    auto it = seen.find(key + " " + metric);
    if (it == seen.end() || it->second.empty())
      return -1;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
  }
};

// The key of the line `name` with these identity keys would have: a row names a measurement
// as the benchmark prints it, and key_of puts the keys in one order.
std::string key(const std::string& name,
                std::initializer_list<std::pair<const char*, std::string>> kv) {
  line l{name, {}};
  for (const auto& [k, v] : kv)
    l.kv[k] = v;
  return key_of(l);
}

// A value for a gnuplot data file: NaN where nothing was measured.
std::string dat(double v) {
  return v < 0 ? std::string("NaN") : std::to_string(v);
}

const std::array<int64_t, 4> kAllreduceBytes = {int64_t(4) << 10, int64_t(256) << 10,
                                                int64_t(4) << 20, int64_t(64) << 20};

std::string fixed(double v, int digits) {
  if (v < 0)
    return "n/a";
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

struct row {
  std::string what;
  double ours;
  double peer;       // < 0: none; in a world-2-over-world-1 row, actorch's world-1 step
  bool lower_better; // times: the ratio is peer / ours; rates: ours / peer
  std::string unit;
  std::string note;
  bool over_world1 = false; // the ratio is ours / peer, a world-2 step over a world-1 step
};

std::string ratio_text(const row& r) {
  if (r.ours <= 0 || r.peer <= 0)
    return "n/a";
  if (r.over_world1)
    return fixed(r.ours / r.peer, 2);
  return fixed(r.lower_better ? r.peer / r.ours : r.ours / r.peer, 2) + "x";
}

} // namespace

void run_report(const report_options& o, std::ostream& log) {
  ACTORCH_CHECK(o.rounds >= 1, "bench report: rounds must be at least 1 but got ", o.rounds);
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir);
  const std::string exe = quote(self_exe());
  std::string peer_dir = o.peer_dir;
  if (peer_dir.empty()) {
    const char* env = std::getenv("ACTORCH_PEER_DIR");
    peer_dir = env != nullptr ? env : "../shared/bench/peer";
  }
  const bool have_peers = fs::exists(fs::path(peer_dir) / "torch_ddp_mlp.py");
  const std::string py = quote(o.python);
  auto peer = [&](const std::string& script, const std::string& args) -> std::string {
    const fs::path p = fs::path(peer_dir) / script;
    return have_peers && fs::exists(p) ? py + " " + quote(p.string()) + " " + args : "";
  };
  // One compute thread per replica and worker, as WORKLOADS.md says, for both sides.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  // The peers run over actorch's torch.distributed backend too where `import actorch` works: the
  // package of this build (<build>/python, beside tools/) first, else an installed one.
  const fs::path package = fs::path(self_exe()).parent_path().parent_path() / "python";
  if (fs::exists(package / "actorch" / "__init__.py")) {
    const char* old = std::getenv("PYTHONPATH");
    const std::string path =
        package.string() + (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  const bool torch_backend =
      have_peers && std::system((py + " -c 'import actorch, torch.distributed as d; "
                                      "assert hasattr(d.Backend, \"ACTORCH\")' > /dev/null 2>&1")
                                    .c_str()) == 0;

  const int n_loader = o.quick ? 2000 : 20000, n_heavy = o.quick ? 1000 : 10000;
  const std::string ddp_steps = o.quick ? " --warmup 1 --steps 3" : "";
  const std::vector<int> loader_workers =
      o.quick ? std::vector<int>{0, 2} : std::vector<int>{0, 1, 2, 4};
  const std::vector<int> widths =
      o.quick ? std::vector<int>{1024} : std::vector<int>{1024, 2048, 4096};
  std::vector<job> jobs;
  // The tensor workload's peer is ours, bench/peer_tensor.py, unless the peer directory has
  // one of its own.
  const bool own_tensor_peer = fs::exists(fs::path(peer_dir) / "peer_tensor.py");
  jobs.push_back({exe + " bench tensor --min-seconds " + (o.quick ? "0.05" : "0.3"),
                  own_tensor_peer ? peer("peer_tensor.py", "")
                  : have_peers
                      ? py + " " + quote(std::string(ACTORCH_SOURCE_DIR) + "/bench/peer_tensor.py")
                      : ""});
  for (int w : loader_workers)
    jobs.push_back({exe + " bench loader --workers " + std::to_string(w) + " --passes 1 --n " +
                        std::to_string(n_loader),
                    peer("torch_loader.py", std::to_string(w) + " 1 " + std::to_string(n_loader))});
  jobs.push_back({exe + " bench loader --workers 2 --passes 20 --n " + std::to_string(n_heavy),
                  peer("torch_loader.py", "2 20 " + std::to_string(n_heavy)),
                  exe + " bench loader-raw --threads 2 --passes 20 --n " + std::to_string(n_heavy),
                  o.quick ? 1 : 7});
  jobs.push_back(
      {exe + " bench loader-raw --threads 1 --passes 1 --n " + std::to_string(n_loader), "",
       exe + " bench loader-raw --threads 2 --passes 1 --n " + std::to_string(n_loader)});
  jobs.push_back({exe + " bench allreduce --world 2" +
                      (o.quick ? std::string(" --bytes 4096 --bytes 262144") : std::string()),
                  o.quick ? "" : peer("torch_allreduce.py", "2")});
  // Every collective at worlds 2 and 4 beside torch over gloo (quick: world 2, small sizes).
  const std::vector<int> coll_worlds = o.quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  for (int w : coll_worlds)
    jobs.push_back({exe + " bench collectives --world " + std::to_string(w) +
                        (o.quick ? " --max-bytes 8192" : ""),
                    peer("torch_collectives.py", std::to_string(w))});
  // The same sweep and torch's DDP step through torch.distributed over the backend "actorch"
  // (issue 41), against the peers over gloo above and below.
  if (torch_backend) {
    for (int w : coll_worlds)
      jobs.push_back({peer("torch_collectives.py", std::to_string(w) + " actorch"), "", "", 1,
                      "torch-actorch"});
    jobs.push_back({peer("torch_ddp_mlp.py", o.quick ? "2 3 actorch" : "2 50 actorch"), ""});
  }
  jobs.push_back({exe + " bench ddp-mlp --mode single --world 1" + ddp_steps,
                  peer("torch_ddp_mlp.py", o.quick ? "1 3" : "1")});
  for (const char* mode : {"independent", "actors", "process", "dp"})
    jobs.push_back(
        {exe + " bench ddp-mlp --mode " + mode + " --world 2" + ddp_steps,
         std::string(mode) == "actors" ? peer("torch_ddp_mlp.py", o.quick ? "2 3" : "2") : ""});
  for (int h : widths) {
    if (h == kHidden)
      continue;
    const std::string wide = " --hidden " + std::to_string(h) + " --warmup 2 --steps 15";
    for (const char* mode :
         {"single --world 1", "independent --world 2", "actors --world 2", "process --world 2"})
      jobs.push_back({exe + " bench ddp-mlp --mode " + mode + wide, ""});
  }

  // The images workload reads a tree of JPEGs this report writes once (bench/make_images.py).
  const std::vector<int> image_workers =
      o.quick ? std::vector<int>{0, 2} : std::vector<int>{0, 1, 2};
  const std::string images = (fs::path(o.out_dir) / "images").string();
  if (!fs::exists(images)) {
    log << "bench report: writing the image set " << images << std::endl;
    run(py + " " + quote(std::string(ACTORCH_SOURCE_DIR) + "/bench/make_images.py") + " " +
        quote(images) + (o.quick ? " --n 128" : " --n 3000"));
  }
  for (int w : image_workers)
    jobs.push_back(
        {exe + " bench images --root " + quote(images) + " --workers " + std::to_string(w),
         peer("torch_images.py", quote(images) + " " + std::to_string(w))});

  medians m;
  std::ofstream raw(fs::path(o.out_dir) / "raw.txt");
  for (int r = 0; r < o.rounds; ++r) {
    log << "bench report: round " << r + 1 << " of " << o.rounds << std::endl;
    for (const job& j : jobs) {
      std::vector<std::string> cmds;
      for (int k = 0; k < j.repeat; ++k) { // ours and its partner, alternating which is first
        const bool flip = (r + k) % 2 == 1 && !j.partner.empty();
        cmds.push_back(flip ? j.partner : j.ours);
        if (!j.partner.empty())
          cmds.push_back(flip ? j.ours : j.partner);
      }
      if (!j.peer.empty())
        cmds.insert(r % 2 == 0 ? cmds.end() : cmds.begin(), j.peer);
      for (const std::string& c : cmds) {
        std::string out = run(c);
        if (c == j.ours && !j.backend_label.empty())
          out = relabel(out, j.backend_label);
        raw << "# round " << r + 1 << ": " << c << "\n" << out;
        m.add(parse(out));
      }
    }
  }
  raw.close();

  // The table.
  auto loader_key = [&](const char* name, int w, int passes, int n) {
    return key(name, {{"workers", std::to_string(w)},
                      {"passes", std::to_string(passes)},
                      {"n", std::to_string(n)}});
  };
  auto raw_key = [&](int threads, int passes, int n) { // the line has threads only above 1
    if (threads == 1)
      return key("loader-raw", {{"passes", std::to_string(passes)}, {"n", std::to_string(n)}});
    return key("loader-raw", {{"threads", std::to_string(threads)},
                              {"passes", std::to_string(passes)},
                              {"n", std::to_string(n)}});
  };
  auto ddp = [&](const char* mode, int world, int hidden) { // hidden and depth only if wide
    if (hidden == kHidden)
      return m.get(key("ddp-mlp", {{"mode", mode}, {"world", std::to_string(world)}}),
                   "ms_per_step");
    return m.get(key("ddp-mlp", {{"mode", mode},
                                 {"world", std::to_string(world)},
                                 {"hidden", std::to_string(hidden)},
                                 {"depth", "1"}}),
                 "ms_per_step");
  };
  auto allreduce = [&](const char* name, int64_t bytes, const char* metric) {
    return m.get(key(name, {{"world", "2"}, {"bytes", std::to_string(bytes)}}), metric);
  };
  std::vector<row> rows;
  rows.push_back({"GEMM 1024, float32, 1 thread",
                  m.get(key("tensor", {{"op", "gemm"}, {"n", "1024"}}), "gflops"),
                  m.get(key("torch-tensor", {{"op", "gemm"}, {"n", "1024"}}), "gflops"), false,
                  "GFLOP/s", ""});
  rows.push_back({"add_ 64 MiB", m.get(key("tensor", {{"op", "add_"}}), "gbps"),
                  m.get(key("torch-tensor", {{"op", "add_"}}), "gbps"), false, "GB/s", ""});
  double torch_best = -1;
  for (int w : loader_workers)
    torch_best =
        std::max(torch_best, m.get(loader_key("torch-loader", w, 1, n_loader), "samples_per_s"));
  for (int w : loader_workers)
    rows.push_back({"loader W=" + std::to_string(w) + " P=1",
                    m.get(loader_key("loader", w, 1, n_loader), "samples_per_s"),
                    m.get(loader_key("torch-loader", w, 1, n_loader), "samples_per_s"), false,
                    "samples/s", ""});
  const double p1 = m.get(loader_key("loader", 2, 1, n_loader), "samples_per_s");
  rows.push_back({"loader W=2 P=1 vs PyTorch's best worker count", p1, torch_best, false,
                  "samples/s", "target >= 15x"});
  const double p20 = m.get(loader_key("loader", 2, 20, n_heavy), "samples_per_s");
  rows.push_back({"loader W=2 P=20", p20,
                  m.get(loader_key("torch-loader", 2, 20, n_heavy), "samples_per_s"), false,
                  "samples/s", ""});
  const double raw2 = m.get(raw_key(2, 20, n_heavy), "samples_per_s");
  rows.push_back({"loader W=2 P=20 vs loader-raw --threads 2", p20, raw2, false, "samples/s",
                  "efficiency; target >= 0.93"});
  for (const int64_t bytes : kAllreduceBytes) {
    const double ours = allreduce("allreduce", bytes, "time_us");
    if (ours < 0)
      continue;
    const std::string b = std::to_string(bytes);
    rows.push_back({"allreduce " + b + " B, 2 ranks", ours,
                    allreduce("torch-gloo-allreduce", bytes, "time_us"), true, "us",
                    bytes == 4096 ? "target: time <= 0.1x torch" : ""});
    if (bytes == (int64_t(64) << 20))
      rows.push_back({"allreduce 64 MiB bus bandwidth", allreduce("allreduce", bytes, "busbw_GBps"),
                      allreduce("torch-gloo-allreduce", bytes, "busbw_GBps"), false, "GB/s",
                      "target >= 2.5x"});
  }
  // Collectives: bus bandwidth at a small, a middle and the largest size (all of them in
  // collectives.png).
  for (int w : coll_worlds)
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                           "all_to_all", "send_recv"})
      for (const int64_t size : {int64_t(8192), int64_t(128) << 10, int64_t(64) << 20}) {
        const int64_t bytes = std::max<int64_t>(w, size / 4 / w * w) * 4;
        auto coll = [&](const char* backend) {
          return m.get(key("coll", {{"op", op},
                                    {"world", std::to_string(w)},
                                    {"bytes", std::to_string(bytes)},
                                    {"backend", backend}}),
                       "busbw_GBps");
        };
        const double ours = coll("actorch");
        if (ours < 0)
          continue;
        rows.push_back({std::string("coll ") + op + " " + std::to_string(bytes) + " B, world " +
                            std::to_string(w) + " bus bandwidth",
                        ours, coll("gloo"), false, "GB/s",
                        size >= (int64_t(128) << 10) ? "target >= 2x" : "target >= 1x"});
        if (const double via_torch = coll("torch-actorch"); via_torch >= 0)
          rows.push_back({std::string("coll ") + op + " " + std::to_string(bytes) + " B, world " +
                              std::to_string(w) + " through torch.distributed, backend actorch",
                          via_torch, coll("gloo"), false, "GB/s", ""});
      }
  const double single = ddp("single", 1, kHidden);
  const double torch1 =
      m.get(key("torch-ddp-mlp", {{"world", "1"}, {"backend", "gloo"}}), "ms_per_step");
  const double torch2 =
      m.get(key("torch-ddp-mlp", {{"world", "2"}, {"backend", "gloo"}}), "ms_per_step");
  if (torch_backend)
    rows.push_back(
        {"torch's DDP world 2 over the backend actorch (vs over gloo)",
         m.get(key("torch-ddp-mlp", {{"world", "2"}, {"backend", "actorch"}}), "ms_per_step"),
         torch2, true, "ms/step", "target >= 1.5x"});
  rows.push_back({"ddp-mlp world 1 (single)", single, torch1, true, "ms/step", ""});
  rows.push_back({"ddp-mlp 2 independent world-1 runs at once vs actorch world 1",
                  ddp("independent", 2, kHidden), single, false, "ms/step",
                  "no communication: the floor sharing the cores sets", true});
  for (const char* mode : {"actors", "process", "dp"}) {
    const double t = ddp(mode, 2, kHidden);
    rows.push_back({std::string("ddp-mlp world 2, ") + mode, t, torch2, true, "ms/step",
                    std::string(mode) == "dp" ? "" : "target >= 1.5x torch; world-1 limit below"});
    rows.push_back({std::string("ddp-mlp world 2, ") + mode + " vs actorch world 1", t, single,
                    false, "ms/step", "world-2 step / world-1 step; target <= 1.1", true});
  }
  for (int h : widths) {
    if (h == kHidden)
      continue;
    for (const char* mode : {"independent", "actors", "process"})
      rows.push_back(
          {"ddp-mlp hidden " + std::to_string(h) + " world 2, " + mode + " vs actorch world 1",
           ddp(mode, 2, h), ddp("single", 1, h), false, "ms/step",
           "world-2 step / world-1 step; target <= 1.1", true});
  }

  auto image = [&](const char* which, int w, const char* metric) {
    return m.get(key("images", {{"which", which}, {"workers", std::to_string(w)}}), metric);
  };
  double images_best = -1, torch_images_best = -1;
  for (int w : image_workers) {
    images_best = std::max(images_best, image("actorch", w, "rate"));
    torch_images_best = std::max(torch_images_best, image("torch", w, "rate"));
    rows.push_back({"images W=" + std::to_string(w) + " (JPEG, RandomResizedCrop 224)",
                    image("actorch", w, "rate"), image("torch", w, "rate"), false, "images/s", ""});
  }
  rows.push_back({"images, best W vs torchvision's best W", images_best, torch_images_best, false,
                  "images/s", "target >= 2.5x"});
  rows.push_back({"images W=2 first batch", image("actorch", 2, "first_batch_s"),
                  image("torch", 2, "first_batch_s"), true, "s", "target >= 4x (a quarter)"});
  rows.push_back({"images W=2 CPU per image", image("actorch", 2, "cpu_s_per_image"),
                  image("torch", 2, "cpu_s_per_image"), true, "s", "target: below torch's"});
  rows.push_back({"images W=2 peak RSS", image("actorch", 2, "rss_mb"), image("torch", 2, "rss_mb"),
                  true, "MB", "target: below torch's"});

  std::ofstream md(fs::path(o.out_dir) / "report.md");
  md << "# actorch benchmark report\n\n"
     << "Medians of " << o.rounds << " interleaved round(s) on this machine, each workload next "
     << "to its peer in the same round"
     << (have_peers ? "" : " (no peer scripts found at " + peer_dir + ")")
     << ". A ratio above 1 means actorch is faster, except in the \"vs actorch world 1\" rows, "
        "which give world-2 step / world-1 step (1.0 is the limit). Raw lines: raw.txt; plots: "
        "report.png, collectives.png.\n\n"
     << "| workload | actorch | peer | ratio | unit | note |\n|---|---|---|---|---|---|\n";
  for (const row& r : rows)
    md << "| " << r.what << " | " << fixed(r.ours, 2) << " | "
       << fixed(r.peer, 2) + (r.over_world1 ? " (world 1)" : "") << " | " << ratio_text(r) << " | "
       << r.unit << " | " << r.note << " |\n";
  md.close();

  // The plot: four panels, one data file each.
  auto data = [&](const std::string& name) { return std::ofstream(fs::path(o.out_dir) / name); };
  {
    auto f = data("allreduce.dat");
    f << "# bytes actorch_us torch_us\n";
    for (const int64_t bytes : kAllreduceBytes)
      if (const double ours = allreduce("allreduce", bytes, "time_us"); ours > 0)
        f << bytes << " " << ours << " " << dat(allreduce("torch-gloo-allreduce", bytes, "time_us"))
          << "\n";
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  {
    auto f = data("loader.dat");
    const double raw1 = m.get(raw_key(1, 1, n_loader), "samples_per_s");
    f << "# workers actorch torch ideal(min(W,cores) x loader-raw)\n";
    for (int w : loader_workers)
      f << w << " " << dat(m.get(loader_key("loader", w, 1, n_loader), "samples_per_s")) << " "
        << dat(m.get(loader_key("torch-loader", w, 1, n_loader), "samples_per_s")) << " "
        << dat(raw1 < 0 ? raw1 : raw1 * std::min(cores, unsigned(std::max(w, 1)))) << "\n";
  }
  {
    auto f = data("ddp_world.dat");
    f << "# world actors process torch\n";
    f << "1 " << dat(single) << " " << dat(single) << " " << dat(torch1) << "\n";
    f << "2 " << dat(ddp("actors", 2, kHidden)) << " " << dat(ddp("process", 2, kHidden)) << " "
      << dat(torch2) << "\n";
  }
  {
    auto f = data("ddp_width.dat");
    f << "# hidden single actors process\n";
    for (int h : widths)
      f << h << " " << dat(ddp("single", 1, h)) << " " << dat(ddp("actors", 2, h)) << " "
        << dat(ddp("process", 2, h)) << "\n";
  }
  const fs::path gp = fs::path(o.out_dir) / "report.gp";
  {
    std::ofstream f(gp);
    f << "set terminal png size 1400,1000 noenhanced\nset output 'report.png'\n"
      << "set multiplot layout 2,2\n"
      << "set key top left\nset grid\n"
      << "set title 'all_reduce, 2 ranks: time against size'\nset logscale xy\n"
      << "set xlabel 'bytes'\nset ylabel 'microseconds'\n"
      << "plot 'allreduce.dat' using 1:2 with linespoints title 'actorch', '' using 1:3 with "
         "linespoints title 'PyTorch (gloo)'\n"
      << "unset logscale\nset title 'data loader, P=1: samples/s against workers'\n"
      << "set xlabel 'workers'\nset ylabel 'samples/s'\nset logscale y\nset xtics 1\n"
      << "plot 'loader.dat' using 1:2 with linespoints title 'actorch', '' using 1:3 with "
         "linespoints title 'PyTorch DataLoader', '' using 1:4 with lines dashtype 2 title "
         "'plain loop x min(W, cores)'\n"
      << "unset logscale\nset title 'ddp-mlp step against world size'\nset xlabel 'world'\n"
      << "set ylabel 'ms per step'\nset xtics 1\nset yrange [0:*]\n"
      << "plot 'ddp_world.dat' using 1:2 with linespoints title 'actorch actors', '' using 1:3 "
         "with linespoints title 'actorch processes', '' using 1:4 with linespoints title "
         "'PyTorch DDP'\n"
      << "set title 'ddp-mlp step against hidden width'\nset xlabel 'hidden width'\n"
      << "set xtics (1024, 2048, 4096)\nset logscale x 2\nset logscale y\nset yrange [*:*]\n"
      << "plot 'ddp_width.dat' using 1:2 with linespoints title 'world 1', '' using 1:3 with "
         "linespoints title 'world 2, actors', '' using 1:4 with linespoints title 'world 2, "
         "processes'\n"
      << "unset multiplot\n";
  }
  run("cd " + quote(o.out_dir) + " && gnuplot report.gp");
  // Bus bandwidth against size per collective, ours and the peer's (bench/plot_collectives.py).
  {
    std::ifstream in(fs::path(o.out_dir) / "raw.txt");
    std::ofstream coll(fs::path(o.out_dir) / "collectives.txt");
    for (std::string l; std::getline(in, l);)
      if (l.rfind("coll ", 0) == 0)
        coll << l << "\n";
  }
  run(py + " " + quote(std::string(ACTORCH_SOURCE_DIR) + "/bench/plot_collectives.py") + " " +
      quote((fs::path(o.out_dir) / "collectives.txt").string()) + " " +
      quote((fs::path(o.out_dir) / "collectives.png").string()));
  log << "bench report: wrote " << (fs::path(o.out_dir) / "report.md").string() << " and "
      << (fs::path(o.out_dir) / "report.png").string() << std::endl;
}

} // namespace actorch::bench
