// PyTorch's checkpoint format both ways against the real torch (Debian's python3-torch, in the
// test command): files torch.save wrote, read here; files written here, read by
// torch.load(weights_only=True); and the files the restricted unpickler must refuse.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/nn/layers.hpp"
#include "core/ops/factory.hpp"
#include "core/ops/reduce.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/checkpoint.hpp"
#include "core/serialize/safetensors.hpp"
#include "core/serialize/torch_format.hpp"
#include "core/serialize/zip_archive.hpp"
#include "tests/core/files.hpp"

using namespace actorch;
using Catch::Contains;

namespace {

const std::filesystem::path& dir() {
  return test::scratch_dir("torch_format");
}

const pickle_value& at(const pickle_value& v, const std::string& key) {
  const auto& d = std::get<pickle_value::dict>(v.v);
  for (const auto& [k, val] : d.items)
    if (const auto* s = std::get_if<std::string>(&k.v); s && *s == key)
      return val;
  FAIL("no key " << key);
  throw 0;
}

std::vector<double> values(const tensor& t) {
  const tensor d = t.to_double().contiguous();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

} // namespace

TEST_CASE("checkpoints torch.save wrote load with their dtypes, views and values",
          "[serialize][torch]") {
  REQUIRE(test::run_python(dir(), "write_pt", R"(
import collections, torch
sd = collections.OrderedDict()
sd["f32"] = torch.arange(6, dtype=torch.float32).reshape(2, 3)
sd["f64"] = torch.tensor([1.5, -2.25], dtype=torch.float64)
sd["f16"] = torch.tensor([0.5, 3.0], dtype=torch.float16)
sd["bf16"] = torch.tensor([1.0, -8.0], dtype=torch.bfloat16)
sd["i64"] = torch.tensor([1, -2**40])
sd["i32"] = torch.tensor([7, -7], dtype=torch.int32)
sd["i16"] = torch.tensor([300, -300], dtype=torch.int16)
sd["i8"] = torch.tensor([-5, 5], dtype=torch.int8)
sd["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
sd["b"] = torch.tensor([True, False])
base = torch.arange(12.0)
sd["view_t"] = base.view(3, 4).t()
sd["view_slice"] = base[2:5]
torch.save(sd, d + "/sd.pt")
model = torch.nn.Linear(3, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.ones(1, 3)).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 7, "name": "run",
            "none": None, "flag": True, "big": 2**40, "neg": -3}, d + "/ckpt.pt")
torch.save(sd, d + "/legacy.pt", _use_new_zipfile_serialization=False)
)") == 0);
  const auto sd = torch_state_dict(torch_load((dir() / "sd.pt").string()), "sd.pt");
  std::vector<std::string> names;
  for (const auto& [k, t] : sd)
    names.push_back(k);
  CHECK(names == std::vector<std::string>{"f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8",
                                          "u8", "b", "view_t", "view_slice"});
  std::map<std::string, tensor> m(sd.begin(), sd.end());
  CHECK(m["f32"].sizes() == shape_t{2, 3});
  CHECK(values(m["f32"]) == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(values(m["f64"]) == std::vector<double>{1.5, -2.25});
  CHECK(m["f16"].dtype() == dtype::float16);
  CHECK(values(m["f16"]) == std::vector<double>{0.5, 3.0});
  CHECK(m["bf16"].dtype() == dtype::bfloat16);
  CHECK(values(m["bf16"]) == std::vector<double>{1.0, -8.0});
  CHECK(m["i64"].data_ptr<int64_t>()[1] == -(int64_t(1) << 40));
  CHECK(values(m["i32"]) == std::vector<double>{7, -7});
  CHECK(values(m["i16"]) == std::vector<double>{300, -300});
  CHECK(values(m["i8"]) == std::vector<double>{-5, 5});
  CHECK(values(m["u8"]) == std::vector<double>{0, 255});
  CHECK(m["b"].dtype() == dtype::bool_);
  CHECK(values(m["b"]) == std::vector<double>{1, 0});
  // Views keep their strides and share their storage, as in torch.
  CHECK(m["view_t"].sizes() == shape_t{4, 3});
  CHECK(m["view_t"].strides() == shape_t{1, 4});
  CHECK(values(m["view_t"]) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(values(m["view_slice"]) == std::vector<double>{2, 3, 4});
  CHECK(m["view_t"].storage() == m["view_slice"].storage());

  // A training checkpoint: nested dicts, an optimizer's integer keys, tuples and scalars.
  const pickle_value ck = torch_load((dir() / "ckpt.pt").string());
  CHECK(std::get<int64_t>(at(ck, "epoch").v) == 7);
  CHECK(std::get<int64_t>(at(ck, "big").v) == int64_t(1) << 40);
  CHECK(std::get<int64_t>(at(ck, "neg").v) == -3);
  CHECK(std::get<std::string>(at(ck, "name").v) == "run");
  CHECK(std::holds_alternative<pickle_value::none>(at(ck, "none").v));
  CHECK(std::get<bool>(at(ck, "flag").v));
  CHECK(torch_state_dict(at(ck, "model"), "ckpt.pt").size() == 2);
  const auto& state = std::get<pickle_value::dict>(at(at(ck, "optim"), "state").v);
  REQUIRE(state.items.size() == 2);
  CHECK(std::get<int64_t>(state.items[0].first.v) == 0);
  const auto& group = std::get<pickle_value::list>(at(at(ck, "optim"), "param_groups").v);
  CHECK(std::get<double>(at(group.items.at(0), "lr").v) == 1e-3);
  const auto& betas = std::get<pickle_value::tuple>(at(group.items.at(0), "betas").v);
  CHECK(std::get<double>(betas.items.at(1).v) == 0.999);

  CHECK_THROWS_WITH(torch_load((dir() / "legacy.pt").string()),
                    Contains("legacy.pt: PyTorch's legacy checkpoint format"));
}

TEST_CASE("a pickle that names anything but a state dict's globals is refused, never run",
          "[serialize][torch]") {
  REQUIRE(test::run_python(dir(), "write_evil", R"(
import os, pickle, zipfile
class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + d + "/pwned",))
with zipfile.ZipFile(d + "/evil.pt", "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({"w": Evil()}, protocol=2))
    z.writestr("archive/version", "3\n")
with zipfile.ZipFile(d + "/notensor.pt", "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({"w": 1.5}, protocol=2))
)") == 0);
  std::filesystem::remove(dir() / "pwned");
  CHECK_THROWS_WITH(torch_load((dir() / "evil.pt").string()),
                    Contains("refused the global 'posix.system'") && Contains("nothing was run"));
  CHECK_FALSE(std::filesystem::exists(dir() / "pwned"));
  CHECK_THROWS_WITH(torch_state_dict(torch_load((dir() / "notensor.pt").string()), "notensor.pt"),
                    Contains("notensor.pt: w is not a tensor"));
  test::write_file((dir() / "cut.pt").string(),
                   test::read_file((dir() / "evil.pt").string()).substr(0, 40));
  CHECK_THROWS_WITH(torch_load((dir() / "cut.pt").string()), Contains("cut.pt"));
  CHECK_THROWS_WITH(torch_load((dir() / "missing.pt").string()),
                    Contains("missing.pt: cannot open the file: No such file or directory"));
}

TEST_CASE("a pickle nested 100,000 deep is refused, not a crash (Note [Deep pickles])",
          "[serialize][torch]") {
  // 100 KB: an empty tuple (EMPTY_TUPLE) wrapped in a one-tuple (TUPLE1) 100,000 times.
  std::string deep = "\x80\x02)" + std::string(100000, '\x85') + ".";
  const auto no_storage = [](const pickle_storage&) -> tensor {
    FAIL("no storage");
    throw 0;
  };
  CHECK_THROWS_WITH(unpickle(deep, "deep.pkl", no_storage),
                    Contains("deep.pkl") && Contains("nested over 1000"));
  // The same through a zip checkpoint: lists in lists (EMPTY_LIST ... APPEND ...), which
  // Python's pickle.loads reads back.
  REQUIRE(test::run_python(dir(), "write_deep", R"(
import pickle, zipfile
deep = b"\x80\x02" + b"]" * 100000 + b"a" * 99999 + b"."
assert isinstance(pickle.loads(deep), list)
with zipfile.ZipFile(d + "/deep.pt", "w") as z:
    z.writestr("archive/data.pkl", deep)
    z.writestr("archive/version", "3\n")
)") == 0);
  CHECK_THROWS_WITH(torch_load((dir() / "deep.pt").string()), Contains("nested over 1000"));
}

TEST_CASE("files written here load in torch.load(weights_only=True) with views sharing storage",
          "[serialize][torch]") {
  const tensor base = arange(12).to_float();
  named_tensor_list sd{{"w", base.view({3, 4}).transpose(0, 1)},
                       {"slice", base.slice(0, 2, 5)},
                       {"i64", tensor_of({int64_t(1), -(int64_t(1) << 40)})},
                       {"u8", tensor_of({uint8_t(0), uint8_t(255)})},
                       {"f16", tensor_of({0.5, 3.0}).to_half()},
                       {"b", tensor_of({true, false})}};
  save_state_dict_file((dir() / "mine.pt").string(), sd);
  pickle_value::dict extra;
  extra.items.emplace_back(std::string("model"), state_dict_value(sd));
  extra.items.emplace_back(int64_t(3),
                           pickle_value::tuple{{1.5, std::string("x"), pickle_value::none{}}});
  extra.items.emplace_back(std::string("steps"), pickle_value::list{{int64_t(1), int64_t(70000),
                                                                     int64_t(-1) << 35, true}});
  torch_save((dir() / "nested.pt").string(), extra);
  REQUIRE(test::run_python(dir(), "read_mine", R"(
import torch
sd = torch.load(d + "/mine.pt", weights_only=True)
assert list(sd) == ["w", "slice", "i64", "u8", "f16", "b"], list(sd)
assert torch.equal(sd["w"], torch.arange(12.0).view(3, 4).t()), sd["w"]
assert sd["w"].stride() == (1, 4)
assert torch.equal(sd["slice"], torch.tensor([2.0, 3.0, 4.0]))
assert sd["w"].storage().data_ptr() == sd["slice"].storage().data_ptr()
assert sd["i64"].tolist() == [1, -2**40] and sd["u8"].dtype == torch.uint8
assert sd["f16"].dtype == torch.float16 and sd["f16"].tolist() == [0.5, 3.0]
assert sd["b"].tolist() == [True, False]
# torch 1.13's weights_only unpickler has no BINFLOAT (its own optimizer state dicts fail it).
n = torch.load(d + "/nested.pt")
assert n[3] == (1.5, "x", None), n[3]
assert n["steps"] == [1, 70000, -2**35, True], n["steps"]
assert list(n["model"]) == list(sd)
)") == 0);
  // And back: the round trip gives the same tensors.
  const auto again = load_state_dict_file((dir() / "mine.pt").string());
  REQUIRE(again.size() == sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    CHECK(again[i].first == sd[i].first);
    CHECK(values(again[i].second) == values(sd[i].second));
  }
  CHECK_THROWS_WITH(load_state_dict_file((dir() / "mine.npz").string()),
                    Contains("unknown extension (.pt, .pth or .safetensors)"));
}

TEST_CASE("training checkpoints in .pt are torch's layout both ways, optimizers included",
          "[serialize][torch]") {
  // actorch saves: a model after one SGD step with momentum, and the same with Adam.
  for (const std::string kind : {"sgd", "adam"}) {
    nn::sequential model{std::make_shared<nn::linear>(3, 2)};
    std::unique_ptr<optim::optimizer> opt;
    if (kind == "sgd")
      opt = std::make_unique<optim::sgd>(model.parameters(),
                                         optim::sgd_options{.lr = 0.1, .momentum = 0.9});
    else
      opt = std::make_unique<optim::adam>(model.parameters(), optim::adam_options{.lr = 0.01});
    model(ones({4, 3})).sum().backward();
    opt->step();
    save_checkpoint((dir() / (kind + ".pt")).string(), model, *opt, {{"epoch", "4"}});
    save_safetensors((dir() / (kind + "_model.safetensors")).string(), model.state_dict());
  }
  REQUIRE(test::run_python(dir(), "read_ckpt", R"(
import torch
for kind in ("sgd", "adam"):
    ck = torch.load(d + f"/{kind}.pt")
    assert ck["epoch"] == "4"
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    model.load_state_dict(ck["model"])
    opt = (torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.1) if kind == "sgd" else
           torch.optim.Adam(model.parameters(), lr=0.5))
    opt.load_state_dict(ck["optimizer"])
    g = opt.param_groups[0]
    if kind == "sgd":
        assert g["lr"] == 0.1 and g["momentum"] == 0.9, g
        buf = opt.state[model[0].weight]["momentum_buffer"]
        assert buf.shape == (2, 3) and torch.allclose(buf, torch.full((2, 3), 4.0)), buf
    else:
        assert g["lr"] == 0.01 and g["betas"] == (0.9, 0.999), g
        assert float(opt.state[model[0].bias]["step"]) == 1.0
        assert torch.allclose(opt.state[model[0].bias]["exp_avg"], torch.full((2,), 0.4))
    opt.step()  # torch can go on from it
# torch saves, actorch loads: a checkpoint of a model and SGD after one step.
model = torch.nn.Sequential(torch.nn.Linear(3, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5, weight_decay=0.01)
model(torch.ones(4, 3)).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 9},
           d + "/from_torch.pt")
torch.save(model.state_dict(), d + "/bare.pt")
adam = torch.optim.Adam(model.parameters(), amsgrad=True)
torch.save({"model": model.state_dict(), "optimizer": adam.state_dict()}, d + "/amsgrad.pt")
)") == 0);
  nn::sequential model{std::make_shared<nn::linear>(3, 2)};
  optim::sgd opt(model.parameters(), {.lr = 1, .momentum = 0});
  const auto meta = load_checkpoint((dir() / "from_torch.pt").string(), model, opt);
  CHECK(meta.at("epoch") == "9");
  CHECK(opt.lr() == 0.2);
  const auto st = opt.state_dict();
  CHECK(st.metadata.at("param_groups.0.momentum") == "0.5");
  CHECK(st.metadata.at("param_groups.0.weight_decay") == "0.01");
  REQUIRE(st.tensors.size() == 2); // a momentum buffer per parameter
  const auto bare = checkpoint_model_state((dir() / "bare.pt").string());
  REQUIRE(bare.size() == 2);
  CHECK(values(bare[0].second) == values(model.state_dict()[0].second));
  optim::adam adam(model.parameters(), {});
  const tensor before = model.state_dict()[0].second.clone();
  CHECK_THROWS_WITH(load_checkpoint((dir() / "amsgrad.pt").string(), model, adam),
                    Contains("sets amsgrad, which actorch's optimizers do not do"));
  CHECK(values(model.state_dict()[0].second) == values(before)); // nothing half-loaded
}

TEST_CASE("a StepLR's state goes into checkpoints, in torch's layout in .pt files",
          "[serialize][torch][scheduler]") {
  // It had no state_dict: a resumed job started its schedule again from the first epoch's lr.
  const auto trained = [](nn::sequential& model, optim::sgd& opt, optim::step_lr& sched) {
    for (int i = 0; i < 5; ++i) {
      model(ones({4, 3})).sum().backward();
      opt.step();
      opt.zero_grad();
      sched.step();
    }
  };
  for (const std::string ext : {".pt", ".safetensors"}) {
    const std::string path = (dir() / ("sched" + ext)).string();
    nn::sequential model{std::make_shared<nn::linear>(3, 2)};
    optim::sgd opt(model.parameters(), {.lr = 0.8});
    optim::step_lr sched(opt, 2, 0.5);
    trained(model, opt, sched);
    CHECK(opt.lr() == Approx(0.2)); // 0.8 * 0.5^(5 / 2)
    save_checkpoint(path, model, opt, {{"epoch", "5"}}, &sched);

    nn::sequential again{std::make_shared<nn::linear>(3, 2)};
    optim::sgd opt2(again.parameters(), {.lr = 0.8});
    optim::step_lr sched2(opt2, 7, 0.9);
    CHECK(load_checkpoint(path, again, opt2, &sched2).at("epoch") == "5");
    CHECK(sched2.last_epoch() == 5);
    CHECK(opt2.lr() == Approx(0.2));
    sched.step();
    sched2.step();
    CHECK(opt2.lr() == Approx(opt.lr())); // epoch 6: 0.8 * 0.5^3
    CHECK(opt2.lr() == Approx(0.1));

    // Asked for and absent: an error naming the file, and nothing loaded.
    const std::string plain = (dir() / ("plain" + ext)).string();
    save_checkpoint(plain, model, opt, {});
    const tensor before = again.state_dict()[0].second.clone();
    CHECK_THROWS_WITH(load_checkpoint(plain, again, opt2, &sched2),
                      Contains(plain) && Contains("holds no scheduler state"));
    CHECK(values(again.state_dict()[0].second) == values(before));
    CHECK(sched2.last_epoch() == 6);
  }
  REQUIRE(test::run_python(dir(), "read_sched", R"(
import torch
ck = torch.load(d + "/sched.pt")
model = torch.nn.Sequential(torch.nn.Linear(3, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.8)
opt.load_state_dict(ck["optimizer"])
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
sched.load_state_dict(ck["scheduler"])
assert sched.last_epoch == 5 and sched.step_size == 2 and sched.gamma == 0.5, sched.state_dict()
assert abs(sched.get_last_lr()[0] - 0.2) < 1e-12, sched.get_last_lr()
opt.step()
sched.step()
assert abs(opt.param_groups[0]["lr"] - 0.1) < 1e-12, opt.param_groups[0]["lr"]
# torch saves, actorch loads.
opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
for _ in range(3):
    opt.step()
    sched.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict()}, d + "/torch_sched.pt")
)") == 0);
  nn::sequential model{std::make_shared<nn::linear>(3, 2)};
  optim::sgd opt(model.parameters(), {.lr = 9});
  optim::step_lr sched(opt, 4, 0.9);
  load_checkpoint((dir() / "torch_sched.pt").string(), model, opt, &sched);
  CHECK(sched.last_epoch() == 3);
  CHECK(opt.lr() == Approx(0.125));
  sched.step();
  CHECK(opt.lr() == Approx(0.0625));
}

TEST_CASE("zip64 archives, as checkpoints over 4 GiB are, read and written both ways",
          "[serialize][torch]") {
  // A checkpoint over 4 GiB needs zip64 records; the writer can put them everywhere, so that
  // readers meet them on a small file. Ours, Python's zipfile and torch.load read such a file,
  // and ours reads one Python's zipfile wrote with its zip64 limits at 0 (every size, offset
  // and the count in zip64 fields, the first entry's offset 0 left in its 32-bit field).
  const named_tensor_list sd{{"w", arange(6).to_float().view({2, 3})},
                             {"b", tensor_of({int64_t(7), int64_t(-8)})}};
  const std::string plain = torch_save_bytes(state_dict_value(sd));
  const serialize::zip_reader r(plain, "plain");
  serialize::zip_writer w(/*always_zip64=*/true);
  for (const std::string& name : r.names())
    w.add(name, r.read(name));
  const std::string zip64 = w.finish();
  test::write_file((dir() / "zip64.pt").string(), zip64);
  auto check = [&](const named_tensor_list& got) {
    REQUIRE(got.size() == 2);
    CHECK(got[0].first == "w");
    CHECK(values(got[0].second) == std::vector<double>{0, 1, 2, 3, 4, 5});
    CHECK(values(got[1].second) == std::vector<double>{7, -8});
  };
  check(torch_state_dict(torch_load_bytes(zip64, "zip64.pt"), "zip64.pt"));
  REQUIRE(test::run_python(dir(), "zip64", R"(
import struct, zipfile, torch
p = d + "/zip64.pt"
raw = open(p, "rb").read()
assert raw.find(struct.pack("<I", 0x06064b50)) > 0  # the zip64 end record is there
with zipfile.ZipFile(p) as z:
    assert z.testzip() is None
    infos = z.infolist()
    assert all(i.extra[:2] == b"\x01\x00" for i in infos), [i.extra for i in infos]
sd = torch.load(p, weights_only=True)
assert sd["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and sd["b"].tolist() == [7, -8]
# Python's writer with its zip64 limits at 0, over torch's own file.
torch.save(sd, d + "/torch.pt")
zipfile.ZIP64_LIMIT = 0
zipfile.ZIP_FILECOUNT_LIMIT = 0
with zipfile.ZipFile(d + "/torch.pt") as src, zipfile.ZipFile(d + "/python64.pt", "w") as dst:
    for info in src.infolist():
        dst.writestr(info.filename, src.read(info.filename))
)") == 0);
  check(load_state_dict_file((dir() / "python64.pt").string()));
  // A zip64 record that the end record points to but that is gone: an error, not a guess.
  std::string cut = zip64;
  const size_t locator = cut.rfind(std::string("PK\x06\x07", 4));
  REQUIRE(locator != std::string::npos);
  cut[locator] = 'X';
  CHECK_THROWS_WITH(torch_load_bytes(cut, "cut.pt"),
                    Contains("cut.pt") && Contains("zip64 record that is missing"));
}

namespace {

// Bytes this process has read through read(2) and pread(2) so far (/proc/self/io's rchar).
uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:")
      return value;
  FAIL("no rchar in /proc/self/io");
  return 0;
}

} // namespace

TEST_CASE("a checkpoint's container is checked before its data is read, and storages are read "
          "straight into their tensors (Note [Checkpoint memory])",
          "[serialize][torch]") {
  SECTION("an 8 GiB file that is no checkpoint is refused after reading a few KiB") {
    for (const std::string& head : {std::string("PK\x03\x04", 4), std::string("\x00garbage", 8)}) {
      const std::string path = (dir() / "big.pt").string();
      test::write_file(path, head);
      std::filesystem::resize_file(path, uint64_t(8) << 30); // sparse: no disk used
      const uint64_t before = bytes_read_so_far();
      CHECK_THROWS_WITH(torch_load(path),
                        Contains("big.pt") && (Contains("no end of central directory record") ||
                                               Contains("not a PyTorch checkpoint")));
      CHECK(bytes_read_so_far() - before < (uint64_t(1) << 20));
      std::filesystem::remove(path);
    }
  }
  SECTION("deflated records, as Python's zipfile writes them, inflate into their tensors") {
    const named_tensor_list sd{{"w", arange(1000).to_float().view({10, 100})},
                               {"b", tensor_of({int64_t(7), int64_t(-8)})}};
    save_state_dict_file((dir() / "stored.pt").string(), sd);
    REQUIRE(test::run_python(dir(), "deflate", R"(
import zipfile
with zipfile.ZipFile(d + "/stored.pt") as src, \
        zipfile.ZipFile(d + "/deflated.pt", "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        dst.writestr(info.filename, src.read(info.filename))
with zipfile.ZipFile(d + "/deflated.pt") as z:
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
)") == 0);
    const auto got = load_state_dict_file((dir() / "deflated.pt").string());
    REQUIRE(got.size() == 2);
    CHECK(values(got[0].second) == values(sd[0].second));
    CHECK(values(got[1].second) == std::vector<double>{7, -8});
    // A byte changed inside a deflated record: refused by inflate or by the CRC, naming it.
    std::string bytes = test::read_file((dir() / "deflated.pt").string());
    const size_t at = bytes.find("data/0");
    REQUIRE(at != std::string::npos);
    bytes[at + 6 + 40] = char(bytes[at + 6 + 40] ^ 0x55);
    CHECK_THROWS_WITH(torch_load_bytes(bytes, "flipped.pt"),
                      Contains("flipped.pt") &&
                          (Contains("CRC-32") || Contains("inflate") || Contains("corrupt")));
  }
}

TEST_CASE("a pickle whose shared values would expand past its budget is refused (Note [Shared "
          "pickle values])",
          "[serialize][torch]") {
  // Level i is a list holding level i-1 twice: 40 levels are 2^40 values once copied out.
  const auto levels = [](int n) {
    std::string p = "\x80\x02]q";
    p += char(0);
    p += "0"; // POP: each level lives on in the memo only
    for (int i = 1; i <= n; ++i) {
      p += "](h";
      p += char(i - 1);
      p += "h";
      p += char(i - 1);
      p += "eq";
      p += char(i);
      p += "0";
    }
    p += "h";
    p += char(n);
    return p + ".";
  };
  const auto no_storage = [](const pickle_storage&) -> tensor {
    FAIL("no storages");
    return {};
  };
  CHECK_THROWS_WITH(unpickle(levels(40), "laughs.pkl", no_storage),
                    Contains("laughs.pkl") && Contains("shared references copied"));
  // Shared values within the budget still load: 8 levels are 511 lists.
  const pickle_value v = unpickle(levels(8), "small.pkl", no_storage);
  CHECK(std::get<pickle_value::list>(v.v).items.size() == 2);
}
