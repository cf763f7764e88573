// read_state_dict: the pickle of a torch.save'd zip archive, read opcode by opcode.
//
// torch.save (protocol 2) writes a small subset of pickle: containers, strings, numbers, the
// globals collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter and
// torch.<Type>Storage, and persistent ids ('storage', type, key, location, numel) naming the
// records data/<key> of the archive. That subset is what this reader accepts; anything else is
// an error naming the opcode, never a guess.
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "models/state_dict.h"

namespace tessera {
namespace models {
namespace {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kMark,
    kObject
  };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;                                       // string, global "module.name", storage key
  std::vector<ValuePtr> items;                         // tuple, list
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // dict
  torch::ScalarType dtype = torch::kFloat;             // storage
  torch::Tensor tensor;                                // storage bytes (u8) or a tensor
};

// The archive's bytes for PyTorchStreamReader. libtorch's MemoryReadAdapter copies whatever
// range it is asked for; a damaged archive can ask past the end, so this one clamps.
class BytesAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

ValuePtr make(Value::Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

torch::ScalarType storage_dtype(const std::string& global, const std::string& file) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"torch.FloatStorage", torch::kFloat}, {"torch.DoubleStorage", torch::kDouble},
      {"torch.HalfStorage", torch::kHalf},   {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},   {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort}, {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},   {"torch.BoolStorage", torch::kBool}};
  auto it = types.find(global);
  TESSERA_CHECK(it != types.end(), file, ": storage type '", global, "' is not supported");
  return it->second;
}

class Reader {
 public:
  Reader(const std::string& file, caffe2::serialize::PyTorchStreamReader& archive, const char* data,
         size_t size)
      : file_(file), archive_(archive), p_(data), end_(data + size) {}

  // function-length: the pickle machine's dispatch, one case per opcode, read as one table;
  // split, the opcodes would be scattered over functions that each hold a few.
  ValuePtr run() {
    for (;;) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80:
          byte();
          break;  // PROTO
        case 0x95:
          take(8);
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          push(make(Value::Kind::kMark));
          break;  // MARK
        case 'N':
          push(make(Value::Kind::kNone));
          break;  // NONE
        case 0x88:
          push_bool(true);
          break;  // NEWTRUE
        case 0x89:
          push_bool(false);
          break;  // NEWFALSE
        case ')':
          push(make(Value::Kind::kTuple));
          break;  // EMPTY_TUPLE
        case ']':
          push(make(Value::Kind::kList));
          break;  // EMPTY_LIST
        case '}':
          push(make(Value::Kind::kDict));
          break;  // EMPTY_DICT
        case 'K':
          push_int(u(1));
          break;  // BININT1
        case 'M':
          push_int(u(2));
          break;  // BININT2
        case 'J':
          push_int(static_cast<int32_t>(u(4)));
          break;  // BININT
        case 0x8a:
          push_int(long1());
          break;  // LONG1
        case 'G':
          push_float();
          break;  // BINFLOAT
        case 'X':
          push_string(u(4));
          break;  // BINUNICODE
        case 0x8c:
          push_string(u(1));
          break;  // SHORT_BINUNICODE
        case 'c':
          push_global();
          break;  // GLOBAL
        case 'q':
          memo_[u(1)] = top();
          break;  // BINPUT
        case 'r':
          memo_[u(4)] = top();
          break;  // LONG_BINPUT
        case 0x94:
          memo_[memo_.size()] = top();
          break;  // MEMOIZE
        case 'h':
          push(memo(u(1)));
          break;  // BINGET
        case 'j':
          push(memo(u(4)));
          break;  // LONG_BINGET
        case 't':
          push_tuple(pop_mark());
          break;  // TUPLE
        case 0x85:
          push_tuple(pop_n(1));
          break;  // TUPLE1
        case 0x86:
          push_tuple(pop_n(2));
          break;  // TUPLE2
        case 0x87:
          push_tuple(pop_n(3));
          break;  // TUPLE3
        case 'a':
          append(pop_n(1));
          break;  // APPEND
        case 'e':
          append(pop_mark());
          break;  // APPENDS
        case 's':
          set_items(pop_n(2));
          break;  // SETITEM
        case 'u':
          set_items(pop_mark());
          break;  // SETITEMS
        case 'R':
          reduce();
          break;  // REDUCE
        case 'b':
          pop();
          break;  // BUILD: state (_metadata, hooks) does not change weights
        case 'Q':
          persistent_id();
          break;  // BINPERSID
        default:
          throw InvalidArgument(file_ + ": unsupported pickle opcode 0x" + hex(op) +
                                "; tessera reads state_dicts written by torch.save");
      }
    }
  }

 private:
  static std::string hex(uint8_t b) {
    const char* d = "0123456789abcdef";
    return std::string{d[b >> 4], d[b & 15]};
  }
  const char* take(size_t n) {
    TESSERA_CHECK(static_cast<size_t>(end_ - p_) >= n, file_,
                  ": the pickle ends early (truncated "
                  "or not written by torch.save)");
    const char* at = p_;
    p_ += n;
    return at;
  }
  uint8_t byte() { return static_cast<uint8_t>(*take(1)); }
  uint64_t u(size_t n) {
    const char* b = take(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(b[k])) << (8 * k);
    return v;
  }
  int64_t long1() {
    const size_t n = byte();
    TESSERA_CHECK(n <= 8, file_, ": integer of ", n, " bytes is too large");
    if (n == 0) return 0;
    uint64_t v = u(n);
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr top() {
    TESSERA_CHECK(!stack_.empty(), file_, ": malformed pickle (empty stack)");
    return stack_.back();
  }
  ValuePtr pop() {
    ValuePtr v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<ValuePtr> pop_n(size_t n) {
    TESSERA_CHECK(stack_.size() >= n, file_, ": malformed pickle (stack underflow)");
    std::vector<ValuePtr> out(stack_.end() - static_cast<long>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<ValuePtr> pop_mark() {
    for (size_t k = stack_.size(); k-- > 0;) {
      if (stack_[k]->kind == Value::Kind::kMark) {
        std::vector<ValuePtr> out(stack_.begin() + static_cast<long>(k) + 1, stack_.end());
        stack_.resize(k);
        return out;
      }
    }
    throw InvalidArgument(file_ + ": malformed pickle (no mark)");
  }
  ValuePtr memo(uint64_t k) {
    auto it = memo_.find(k);
    TESSERA_CHECK(it != memo_.end(), file_, ": malformed pickle (memo ", k, " unset)");
    return it->second;
  }
  void push_bool(bool b) {
    ValuePtr v = make(Value::Kind::kBool);
    v->i = b;
    push(v);
  }
  void push_int(int64_t i) {
    ValuePtr v = make(Value::Kind::kInt);
    v->i = i;
    push(v);
  }
  void push_float() {
    uint64_t bits = 0;
    const char* b = take(8);
    for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(b[k]);  // big-endian
    ValuePtr v = make(Value::Kind::kFloat);
    std::memcpy(&v->f, &bits, 8);
    push(v);
  }
  void push_string(uint64_t n) {
    ValuePtr v = make(Value::Kind::kString);
    v->s.assign(take(n), n);
    push(v);
  }
  std::string line() {
    std::string s;
    for (char c = static_cast<char>(byte()); c != '\n'; c = static_cast<char>(byte())) s += c;
    return s;
  }
  void push_global() {
    ValuePtr v = make(Value::Kind::kGlobal);
    const std::string module = line();
    v->s = module + "." + line();
    push(v);
  }
  void push_tuple(std::vector<ValuePtr> items) {
    ValuePtr v = make(Value::Kind::kTuple);
    v->items = std::move(items);
    push(v);
  }
  void append(std::vector<ValuePtr> items) {
    ValuePtr list = top();
    TESSERA_CHECK(list->kind == Value::Kind::kList, file_, ": APPEND to a non-list");
    for (auto& i : items) list->items.push_back(i);
  }
  void set_items(std::vector<ValuePtr> kv) {
    ValuePtr dict = top();
    TESSERA_CHECK(dict->kind == Value::Kind::kDict, file_, ": SETITEM on a non-dict");
    for (size_t k = 0; k + 1 < kv.size(); k += 2) dict->entries.emplace_back(kv[k], kv[k + 1]);
  }
  void persistent_id() {
    ValuePtr id = pop();
    TESSERA_CHECK(
        id->kind == Value::Kind::kTuple && id->items.size() >= 5 && id->items[0]->s == "storage",
        file_, ": unsupported persistent id (expected a torch storage)");
    ValuePtr v = make(Value::Kind::kStorage);
    v->dtype = storage_dtype(id->items[1]->s, file_);
    v->s = id->items[2]->s;
    const std::string record = "data/" + v->s;
    TESSERA_CHECK(archive_.hasRecord(record), file_, ": storage record '", record, "' is missing");
    at::DataPtr data;
    size_t bytes = 0;
    std::tie(data, bytes) = archive_.getRecord(record);
    v->tensor = torch::empty({static_cast<int64_t>(bytes)}, torch::kUInt8);
    if (bytes) std::memcpy(v->tensor.data_ptr(), data.get(), bytes);
    push(v);
  }
  void reduce() {
    ValuePtr args = pop();
    ValuePtr fn = pop();
    TESSERA_CHECK(fn->kind == Value::Kind::kGlobal && args->kind == Value::Kind::kTuple, file_,
                  ": unsupported REDUCE");
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      push(make(Value::Kind::kDict));
    } else if (fn->s == "torch._utils._rebuild_tensor_v2" && a.size() >= 4 &&
               a[0]->kind == Value::Kind::kStorage) {
      const Value& storage = *a[0];
      std::vector<int64_t> sizes, strides;
      for (auto& x : a[2]->items) sizes.push_back(x->i);
      for (auto& x : a[3]->items) strides.push_back(x->i);
      torch::Tensor typed = storage.tensor.view(storage.dtype);
      ValuePtr v = make(Value::Kind::kTensor);
      v->tensor = typed.as_strided(sizes, strides, a[1]->i).clone();
      push(v);
    } else if (fn->s == "torch.jit._pickle.restore_type_tag" && !a.empty()) {
      push(a[0]);  // libtorch's pickle_save tags typed containers: the value is the first arg
    } else if (fn->s == "torch._utils._rebuild_parameter" && !a.empty() &&
               a[0]->kind == Value::Kind::kTensor) {
      push(a[0]);
    } else {
      push(make(Value::Kind::kObject));  // anything else is not a weight; kept as opaque
    }
  }

  std::string file_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const char* p_;
  const char* end_;
  std::vector<ValuePtr> stack_;
  std::map<uint64_t, ValuePtr> memo_;
};

}  // namespace

StateDict read_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "cannot read weights from '", path, "': no such file or unreadable");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return parse_state_dict(bytes.str(), path);
}

StateDict parse_state_dict(const std::string& bytes, const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<BytesAdapter>(bytes));
  } catch (const c10::Error& e) {
    throw InvalidArgument("'" + path + "' is not a PyTorch zip archive (torch.save since 1.6 or " +
                          "tessera export), or it is truncated: " + e.what_without_backtrace());
  } catch (const std::exception& e) {  // libtorch's zip reader throws std:: errors too
    throw InvalidArgument("'" + path + "' is not a PyTorch zip archive (torch.save since 1.6 or " +
                          "tessera export), or it is truncated: " + e.what());
  }
  TESSERA_CHECK(archive->hasRecord("data.pkl"), "'", path,
                "' has no data.pkl: not a torch.save file");
  at::DataPtr data;
  size_t size = 0;
  try {
    std::tie(data, size) = archive->getRecord("data.pkl");
  } catch (const c10::Error& e) {
    throw InvalidArgument("'" + path + "': cannot read data.pkl: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw InvalidArgument("'" + path + "': cannot read data.pkl: " + e.what());
  }
  Reader reader(path, *archive, static_cast<const char*>(data.get()), size);
  ValuePtr root;
  try {
    root = reader.run();
  } catch (const c10::Error& e) {
    throw InvalidArgument("'" + path + "' is damaged: " + e.what_without_backtrace());
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& e) {
    throw InvalidArgument("'" + path + "' is damaged: " + e.what());
  }
  TESSERA_CHECK(root->kind == Value::Kind::kDict, "'", path,
                "' does not hold a dict of tensors (a state_dict)");
  // A checkpoint that holds the state_dict under a key.
  for (const auto& kv : root->entries) {
    if (kv.first->kind == Value::Kind::kString &&
        (kv.first->s == "state_dict" || kv.first->s == "model") &&
        kv.second->kind == Value::Kind::kDict) {
      root = kv.second;
      break;
    }
  }
  StateDict out;
  for (const auto& kv : root->entries) {
    if (kv.first->kind != Value::Kind::kString || kv.second->kind != Value::Kind::kTensor) continue;
    out.emplace_back(kv.first->s, kv.second->tensor);
  }
  TESSERA_CHECK(!out.empty(), "'", path, "' holds no named tensors");
  return out;
}

}  // namespace models
}  // namespace tessera
