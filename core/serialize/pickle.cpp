// The restricted unpickler and the protocol-2 pickler of pickle.hpp. The unpickler is a stack
// machine over Python's opcodes as pickletools documents them; its objects are shared nodes, as
// Python's are (a memoised dict filled after its PUT is the same dict when fetched), turned into
// pickle_value trees at STOP.
#include "core/serialize/pickle.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <map>

#include "base/error.hpp"
#include "base/text.hpp"
#include "core/ops/factory.hpp"

namespace actorch {

namespace {

// A Python object on the unpickler's stack or in its memo.
struct node;
using ref = std::shared_ptr<node>;
struct node {
  enum class kind { mark, value, tuple, list, dict, global } k = kind::value;
  pickle_value value;                  // kind::value: a scalar or a tensor
  std::vector<ref> items;              // tuple, list
  std::vector<std::pair<ref, ref>> kv; // dict
  bool ordered = false;                // dict: an OrderedDict
  ref state;                           // dict: its BUILD state (attributes), or null
  std::string module, name;            // global

  node() = default;
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  ~node();
};

// Note [Deep pickles]
// ~~~~~~~~~~~~~~~~~~~
// 200 KB of pickle nest 100,000 tuples. The conversion refuses values nested over 1000 deep,
// but the parse tree is already built then, and destroying it node by node through
// shared_ptr's destructors would recurse once per level and overflow the stack. So a node's
// destructor hands the children it alone owns to a worklist, which it empties in a loop: each
// node is destroyed with no children left, whatever the depth.
node::~node() {
  std::vector<ref> work;
  const auto take = [&work](node& n) {
    for (ref& r : n.items)
      work.push_back(std::move(r));
    for (auto& [key, val] : n.kv) {
      work.push_back(std::move(key));
      work.push_back(std::move(val));
    }
    n.items.clear();
    n.kv.clear();
    if (n.state)
      work.push_back(std::move(n.state));
  };
  take(*this);
  while (!work.empty()) {
    ref r = std::move(work.back());
    work.pop_back();
    if (r.use_count() == 1) // the unpickler runs on one thread: the count is exact
      take(*r);
  }
}

ref make(node::kind k) {
  auto n = std::make_shared<node>();
  n->k = k;
  return n;
}
ref make_value(pickle_value v) {
  auto n = std::make_shared<node>();
  n->value = std::move(v);
  return n;
}

// torch's storage types, one per dtype: the one table both directions read.
constexpr std::array<std::pair<const char*, dtype>, num_dtypes> kStorageTypes{{
    {"FloatStorage", dtype::float32},
    {"DoubleStorage", dtype::float64},
    {"HalfStorage", dtype::float16},
    {"BFloat16Storage", dtype::bfloat16},
    {"LongStorage", dtype::int64},
    {"IntStorage", dtype::int32},
    {"ShortStorage", dtype::int16},
    {"CharStorage", dtype::int8},
    {"ByteStorage", dtype::uint8},
    {"BoolStorage", dtype::bool_},
}};

std::optional<dtype> storage_dtype(const std::string& module, const std::string& name) {
  if (module == "torch")
    for (const auto& [n, t] : kStorageTypes)
      if (name == n)
        return t;
  return std::nullopt;
}

const char* storage_name(dtype t) {
  for (const auto& [n, type] : kStorageTypes)
    if (type == t)
      return n;
  ACTORCH_FAIL("pickle: no torch storage type for dtype ", dtype_name(t));
}

class unpickler {
public:
  unpickler(std::string_view bytes, const std::string& name,
            const std::function<tensor(const pickle_storage&)>& storage)
      : in_(bytes), name_(name), storage_(storage) {}

  pickle_value run() {
    for (;;) {
      const uint8_t op = byte();
      switch (op) {
      case 0x80: (void)byte(); break;            // PROTO
      case 0x95: (void)fixed<uint64_t>(); break; // FRAME: the frames' bytes follow in line
      case '.': return finish();                 // STOP
      case '(': stack_.push_back(make(node::kind::mark)); break;
      case '0': (void)pop(); break;             // POP
      case '1': (void)pop_mark(); break;        // POP_MARK
      case '2': stack_.push_back(top()); break; // DUP
      case 'N': push(pickle_value::none{}); break;
      case 0x88: push(true); break;
      case 0x89: push(false); break;
      case 'J': push(int64_t(fixed<int32_t>())); break;  // BININT
      case 'K': push(int64_t(byte())); break;            // BININT1
      case 'M': push(int64_t(fixed<uint16_t>())); break; // BININT2
      case 0x8a: push(long1(byte())); break;             // LONG1
      case 'G': push(binfloat()); break;
      case 'X': push(text(fixed<uint32_t>())); break;          // BINUNICODE
      case 0x8c: push(text(byte())); break;                    // SHORT_BINUNICODE
      case 0x8d: push(text(size_t(fixed<uint64_t>()))); break; // BINUNICODE8
      case ')': stack_.push_back(make(node::kind::tuple)); break;
      case 't': tuple_of(pop_mark()); break;
      case 0x85: tuple_of(pop_n(1)); break;
      case 0x86: tuple_of(pop_n(2)); break;
      case 0x87: tuple_of(pop_n(3)); break;
      case ']': stack_.push_back(make(node::kind::list)); break;
      case 'l': { // LIST
        auto l = make(node::kind::list);
        l->items = pop_mark();
        stack_.push_back(l);
        break;
      }
      case 'a': { // APPEND
        ref v = pop();
        container(node::kind::list, "APPEND")->items.push_back(v);
        break;
      }
      case 'e': { // APPENDS
        std::vector<ref> vs = pop_mark();
        auto& l = container(node::kind::list, "APPENDS")->items;
        l.insert(l.end(), vs.begin(), vs.end());
        break;
      }
      case '}': stack_.push_back(make(node::kind::dict)); break;
      case 'd': { // DICT
        auto d = make(node::kind::dict);
        set_items(*d, pop_mark());
        stack_.push_back(d);
        break;
      }
      case 's': { // SETITEM
        ref v = pop(), k = pop();
        container(node::kind::dict, "SETITEM")->kv.emplace_back(k, v);
        break;
      }
      case 'u': { // SETITEMS
        std::vector<ref> kvs = pop_mark();
        set_items(*container(node::kind::dict, "SETITEMS"), kvs);
        break;
      }
      case 'q': memo_[byte()] = top(); break;                     // BINPUT
      case 'r': memo_[fixed<uint32_t>()] = top(); break;          // LONG_BINPUT
      case 0x94: memo_[uint32_t(memo_.size())] = top(); break;    // MEMOIZE
      case 'h': stack_.push_back(memo(byte())); break;            // BINGET
      case 'j': stack_.push_back(memo(fixed<uint32_t>())); break; // LONG_BINGET
      case 'c': {                                                 // GLOBAL
        std::string module = line(), attr = line();
        stack_.push_back(global(std::move(module), std::move(attr)));
        break;
      }
      case 0x93: { // STACK_GLOBAL
        ref attr = pop(), module = pop();
        stack_.push_back(
            global(string_of(module, "STACK_GLOBAL"), string_of(attr, "STACK_GLOBAL")));
        break;
      }
      case 'R': reduce(); break;
      case 'b': build(); break;
      case 'Q': persistent(pop()); break; // BINPERSID
      default:
        fail("opcode 0x", hex(op), " at byte ", pos_ - 1,
             ", which a state dict's pickle does not use (torch.save writes protocol 2 with "
             "tensors as persistent ids)");
      }
    }
  }

private:
  template <class... Args> [[noreturn]] void fail(const Args&... args) {
    ACTORCH_FAIL("unpickle: ", name_, ": ", args...);
  }
  static std::string hex(uint8_t b) { return to_hex(&b, 1); }

  uint8_t byte() {
    if (pos_ >= in_.size())
      fail("the pickle ends before its STOP opcode (truncated)");
    return uint8_t(in_[pos_++]);
  }
  std::string_view take(size_t n) {
    if (n > in_.size() - pos_)
      fail("the pickle ends inside a value of ", n, " bytes (truncated)");
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T> T fixed() { // little-endian, as pickle's binary opcodes
    T v;
    std::memcpy(&v, take(sizeof v).data(), sizeof v);
    return v;
  }
  int64_t long1(size_t n) {
    if (n > 8)
      fail("an integer of ", n, " bytes, beyond 64 bits");
    const std::string_view b = take(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= uint64_t(uint8_t(b[i])) << (8 * i);
    if (n > 0 && n < 8 && (uint8_t(b[n - 1]) & 0x80))
      v |= ~uint64_t(0) << (8 * n); // sign-extend
    return int64_t(v);
  }
  double binfloat() { // big-endian
    uint64_t bits = 0;
    for (char c : take(8))
      bits = bits << 8 | uint8_t(c);
    return std::bit_cast<double>(bits);
  }
  std::string text(size_t n) { return std::string(take(n)); }
  std::string line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos)
      fail("a GLOBAL's name does not end (truncated)");
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  void push(pickle_value v) { stack_.push_back(make_value(std::move(v))); }
  ref pop() {
    if (stack_.empty() || stack_.back()->k == node::kind::mark)
      fail("an opcode takes a value from an empty stack (a malformed pickle)");
    ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  ref top() {
    if (stack_.empty())
      fail("an opcode reads an empty stack (a malformed pickle)");
    return stack_.back();
  }
  std::vector<ref> pop_mark() {
    for (size_t i = stack_.size(); i-- > 0;)
      if (stack_[i]->k == node::kind::mark) {
        std::vector<ref> out(stack_.begin() + int64_t(i) + 1, stack_.end());
        stack_.resize(i);
        return out;
      }
    fail("no MARK for an opcode that needs one (a malformed pickle)");
  }
  std::vector<ref> pop_n(size_t n) {
    std::vector<ref> out(n);
    for (size_t i = n; i-- > 0;)
      out[i] = pop();
    return out;
  }
  ref memo(uint32_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end())
      fail("memo key ", key, " is read before it is written (a malformed pickle)");
    return it->second;
  }
  ref container(node::kind k, const char* op) {
    ref c = top();
    if (c->k != k)
      fail(op, " on something that is not a ", k == node::kind::list ? "list" : "dict");
    return c;
  }
  void tuple_of(std::vector<ref> items) {
    auto t = make(node::kind::tuple);
    t->items = std::move(items);
    stack_.push_back(t);
  }
  void set_items(node& d, const std::vector<ref>& kvs) {
    if (kvs.size() % 2 != 0)
      fail("SETITEMS with an odd number of values (a malformed pickle)");
    for (size_t i = 0; i < kvs.size(); i += 2)
      d.kv.emplace_back(kvs[i], kvs[i + 1]);
  }
  std::string string_of(const ref& r, const char* op) {
    if (r->k != node::kind::value || !std::holds_alternative<std::string>(r->value.v))
      fail(op, " needs strings");
    return std::get<std::string>(r->value.v);
  }

  // Note [Restricted unpickling]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A pickle calls whatever its GLOBAL opcodes name; a checkpoint
  // from elsewhere may name os.system. Only the globals of a state dict are recognised, and none
  // of them is ever called: each is built here from what it stands for.
  ref global(std::string module, std::string attr) {
    const bool known = (module == "collections" && attr == "OrderedDict") ||
                       (module == "torch._utils" &&
                        (attr == "_rebuild_tensor_v2" || attr == "_rebuild_parameter")) ||
                       storage_dtype(module, attr);
    // What torch's weights-only load reads and actorch cannot hold: said as such, not as a
    // refusal torch would share.
    if (!known && module == "torch" && attr.ends_with("Storage"))
      fail("a tensor of torch.", attr, ", a dtype actorch does not have (its dtypes: float32, ",
           "float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool); torch.load reads ",
           "it; nothing was run");
    if (!known && module == "torch._utils" &&
        (attr == "_rebuild_sparse_tensor" || attr == "_rebuild_sparse_csr"))
      fail("a sparse tensor (torch._utils.", attr, "): actorch.load reads strided tensors only ",
           "(torch.load reads it; save its .to_dense()); nothing was run");
    if (!known)
      fail("refused the global '", module, ".", attr,
           "': a checkpoint of state dicts names only collections.OrderedDict, "
           "torch._utils._rebuild_tensor_v2 and _rebuild_parameter, and torch's storage types "
           "(torch.load(weights_only=True) refuses it too); nothing was run");
    auto g = make(node::kind::global);
    g->module = std::move(module);
    g->name = std::move(attr);
    return g;
  }

  void reduce() {
    ref args = pop(), fn = pop();
    if (fn->k != node::kind::global || args->k != node::kind::tuple)
      fail("REDUCE of something other than a known global over a tuple");
    const auto& a = args->items;
    if (fn->module == "collections") { // OrderedDict(), filled by SETITEMS
      if (!a.empty())
        fail("collections.OrderedDict called with ", a.size(), " arguments");
      auto d = make(node::kind::dict);
      d->ordered = true;
      stack_.push_back(d);
      return;
    }
    if (fn->name == "_rebuild_parameter") { // (data, requires_grad, backward_hooks)
      if (a.size() < 2 || a[0]->k != node::kind::value ||
          !std::holds_alternative<tensor>(a[0]->value.v) || a[1]->k != node::kind::value ||
          !std::holds_alternative<bool>(a[1]->value.v))
        fail("_rebuild_parameter without a tensor and its requires_grad");
      pickle_value p = a[0]->value;
      p.parameter = true;
      p.requires_grad = std::get<bool>(a[1]->value.v);
      stack_.push_back(make_value(std::move(p)));
      return;
    }
    if (fn->name != "_rebuild_tensor_v2")
      fail("REDUCE of ", fn->module, ".", fn->name, ", which is not callable here");
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (a.size() < 4 || a[0]->k != node::kind::value ||
        !std::holds_alternative<tensor>(a[0]->value.v))
      fail("_rebuild_tensor_v2 with ", a.size(), " arguments, or without a storage");
    const tensor& base = std::get<tensor>(a[0]->value.v);
    const int64_t offset = integer(a[1], "a tensor's storage offset");
    const shape_t size = ints(a[2], "a tensor's size"), stride = ints(a[3], "a tensor's stride");
    if (size.size() != stride.size())
      fail("a tensor of ", size.size(), " sizes but ", stride.size(), " strides");
    // The view must stay inside its storage.
    int64_t last = offset;
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      if (size[d] < 0 || stride[d] < 0)
        fail("a tensor with a negative size or stride");
      empty |= size[d] == 0;
      last += (size[d] - 1) * stride[d];
    }
    if (offset < 0 || (!empty && last >= base.numel()))
      fail("a tensor view (offset ", offset, ", size ", shape_str(size), ", stride ",
           shape_str(stride), ") reaches past its storage of ", base.numel(), " elements");
    stack_.push_back(make_value(base.as_strided(size, stride, offset)));
  }

  int64_t integer(const ref& r, const char* what) {
    if (r->k != node::kind::value || !std::holds_alternative<int64_t>(r->value.v))
      fail(what, " is not an integer");
    return std::get<int64_t>(r->value.v);
  }
  shape_t ints(const ref& r, const char* what) {
    if (r->k != node::kind::tuple)
      fail(what, " is not a tuple");
    shape_t out;
    for (const ref& i : r->items)
      out.push_back(integer(i, what));
    return out;
  }

  void build() {
    ref state = pop();
    ref obj = top();
    // An OrderedDict's instance attributes (a state dict's _metadata: the modules' versions).
    if (obj->k == node::kind::dict && obj->ordered && state->k == node::kind::dict && !obj->state) {
      for (const auto& [key, value] : state->kv)
        string_of(key, "an OrderedDict's attributes");
      obj->state = state;
      return;
    }
    fail("BUILD on something other than an OrderedDict (an object's state), or twice");
  }

  void persistent(const ref& pid) {
    // ('storage', storage type, key, location, numel)
    if (pid->k != node::kind::tuple || pid->items.size() != 5 ||
        pid->items[0]->k != node::kind::value ||
        !std::holds_alternative<std::string>(pid->items[0]->value.v) ||
        std::get<std::string>(pid->items[0]->value.v) != "storage" ||
        pid->items[1]->k != node::kind::global)
      fail("a persistent id that is not torch's ('storage', type, key, location, numel)");
    const ref& type = pid->items[1];
    const auto dt = storage_dtype(type->module, type->name);
    if (!dt)
      fail("a storage of type ", type->module, ".", type->name);
    pickle_storage s{string_of(pid->items[2], "a storage's key"), *dt,
                     integer(pid->items[4], "a storage's size"),
                     string_of(pid->items[3], "a storage's location")};
    if (s.numel < 0)
      fail("a storage of ", s.numel, " elements");
    auto it = storages_.find(s.key);
    if (it == storages_.end())
      it = storages_.emplace(s.key, storage_(s)).first;
    else if (it->second.dtype() != s.type)
      fail("storage ", s.key, " is read as two dtypes");
    push(it->second);
  }

  // Note [Shared pickle values]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A memo GET shares a node, and the conversion copies it into every place it is shared: 30
  // lists each holding the previous one twice are 60 opcodes and 2^30 values. So what the
  // conversion builds (a value's size, and a string's bytes) may not exceed 64 MiB plus 64
  // times the pickle's bytes, far above what a state dict or an optimizer's state builds.
  void spend(size_t bytes) {
    built_ += bytes;
    if (built_ > budget_)
      fail("the values it builds pass ", budget_ >> 20, " MiB, 64 times its ", in_.size(),
           " bytes (shared references copied into each place: a hostile or malformed pickle)");
  }

  pickle_value convert(const ref& r, int depth) {
    if (depth > 1000)
      fail("values nested over 1000 deep (or a cycle)");
    spend(sizeof(pickle_value));
    switch (r->k) {
    case node::kind::value:
      if (const auto* text = std::get_if<std::string>(&r->value.v))
        spend(text->size());
      return r->value;
    case node::kind::tuple: {
      pickle_value::tuple t;
      for (const ref& i : r->items)
        t.items.push_back(convert(i, depth + 1));
      return t;
    }
    case node::kind::list: {
      pickle_value::list l;
      for (const ref& i : r->items)
        l.items.push_back(convert(i, depth + 1));
      return l;
    }
    case node::kind::dict: {
      pickle_value::dict d;
      d.ordered = r->ordered;
      for (const auto& [k, v] : r->kv)
        d.items.emplace_back(convert(k, depth + 1), convert(v, depth + 1));
      if (r->state)
        for (const auto& [k, v] : r->state->kv)
          d.attributes.emplace_back(string_of(k, "an OrderedDict's attributes"),
                                    convert(v, depth + 1));
      return d;
    }
    case node::kind::global:
      fail("a bare reference to ", r->module, ".", r->name, " in the result");
    case node::kind::mark: break;
    }
    fail("a MARK left in the result (a malformed pickle)");
  }

  pickle_value finish() {
    if (stack_.size() != 1)
      fail("STOP with ", stack_.size(), " values on the stack (a malformed pickle)");
    return convert(stack_.back(), 0);
  }

  std::string_view in_;
  size_t pos_ = 0;
  size_t built_ = 0; // see Note [Shared pickle values]
  size_t budget_ = (size_t(64) << 20) + 64 * in_.size();
  const std::string& name_;
  const std::function<tensor(const pickle_storage&)>& storage_;
  std::vector<ref> stack_;
  std::map<uint32_t, ref> memo_;
  std::map<std::string, tensor> storages_;
};

class pickler {
public:
  explicit pickler(const std::function<std::string(const tensor&)>& storage) : storage_(storage) {}

  std::string run(const pickle_value& v) {
    out_ += "\x80\x02";
    write(v);
    out_ += '.';
    return std::move(out_);
  }

private:
  void write_int(int64_t i) {
    if (i >= 0 && i < 256) {
      out_ += 'K';
      out_ += char(i);
    } else if (i >= 0 && i < 65536) {
      out_ += 'M';
      raw(uint16_t(i));
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      out_ += 'J';
      raw(int32_t(i));
    } else {
      out_ += '\x8a';
      out_ += char(8);
      raw(i);
    }
  }
  template <class T> void raw(T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out_.append(b, sizeof v);
  }
  void write_text(const std::string& s) {
    out_ += 'X';
    raw(uint32_t(s.size()));
    out_ += s;
  }
  void write_tuple(const std::vector<int64_t>& v) {
    out_ += '(';
    for (int64_t i : v)
      write_int(i);
    out_ += 't';
  }
  void write(const pickle_value& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, pickle_value::none>) {
            out_ += 'N';
          } else if constexpr (std::is_same_v<T, bool>) {
            out_ += x ? '\x88' : '\x89';
          } else if constexpr (std::is_same_v<T, int64_t>) {
            write_int(x);
          } else if constexpr (std::is_same_v<T, double>) {
            out_ += 'G';
            const uint64_t bits = std::bit_cast<uint64_t>(x);
            for (int s = 56; s >= 0; s -= 8)
              out_ += char((bits >> s) & 0xff);
          } else if constexpr (std::is_same_v<T, std::string>) {
            write_text(x);
          } else if constexpr (std::is_same_v<T, pickle_value::tuple>) {
            out_ += '(';
            for (const auto& i : x.items)
              write(i);
            out_ += 't';
          } else if constexpr (std::is_same_v<T, pickle_value::list>) {
            out_ += ']';
            if (!x.items.empty()) {
              out_ += '(';
              for (const auto& i : x.items)
                write(i);
              out_ += 'e';
            }
          } else if constexpr (std::is_same_v<T, pickle_value::dict>) {
            out_ += x.ordered ? "ccollections\nOrderedDict\n)R" : "}";
            if (!x.items.empty()) {
              out_ += '(';
              for (const auto& [k, val] : x.items) {
                write(k);
                write(val);
              }
              out_ += 'u';
            }
            if (!x.attributes.empty()) { // BUILD with the state dict of its attributes
              out_ += "}(";
              for (const auto& [name, val] : x.attributes) {
                write_text(name);
                write(val);
              }
              out_ += "ub";
            }
          } else if (v.parameter) { // torch._utils._rebuild_parameter(data, requires_grad, hooks)
            out_ += "ctorch._utils\n_rebuild_parameter\n(";
            write_tensor(x);
            out_ += v.requires_grad ? '\x88' : '\x89';
            out_ += "ccollections\nOrderedDict\n)R";
            out_ += "tR";
          } else {
            write_tensor(x);
          }
        },
        v.v);
  }
  void write_tensor(const tensor& t) {
    ACTORCH_CHECK(t.defined(), "pickle: an undefined tensor cannot be saved");
    const std::string key = storage_(t);
    out_ += "ctorch._utils\n_rebuild_tensor_v2\n(";
    // The persistent id: ('storage', torch.<Type>Storage, key, 'cpu', numel).
    out_ += '(';
    write_text("storage");
    out_ += std::string("ctorch\n") + storage_name(t.dtype()) + "\n";
    write_text(key);
    write_text("cpu");
    write_int(int64_t(t.storage()->nbytes() / t.element_size()));
    out_ += "tQ";
    write_int(t.storage_offset());
    write_tuple(t.sizes());
    write_tuple(t.strides());
    out_ += '\x89'; // requires_grad: False (a state dict's tensors are detached)
    out_ += "ccollections\nOrderedDict\n)R"; // backward_hooks
    out_ += "tR";
  }

  const std::function<std::string(const tensor&)>& storage_;
  std::string out_;
};

} // namespace

pickle_value unpickle(std::string_view bytes, const std::string& name,
                      const std::function<tensor(const pickle_storage&)>& storage) {
  return unpickler(bytes, name, storage).run();
}

std::string pickle(const pickle_value& v,
                   const std::function<std::string(const tensor&)>& storage) {
  return pickler(storage).run(v);
}

} // namespace actorch
