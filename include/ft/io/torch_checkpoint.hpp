#pragma once
// Reading `pytorch_model*.bin`: state dicts written by torch.save, read-only
// and without Python. Older HF checkpoints ship weights this way.
//
// The file is a zip archive (entries stored, not compressed) holding
//   <archive>/data.pkl     a pickle (protocol 2) of the state dict
//   <archive>/data/<key>   the raw bytes of each storage, little-endian
// In the pickle, each tensor is
//   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
// where `storage` is a persistent id ("storage", torch.<Type>Storage, key,
// device, numel). ft runs a small pickle machine that understands exactly
// these objects (plus OrderedDict and _rebuild_parameter); any other global is
// refused by name, so a pickle can never run code or build objects here.
//
// Tensors whose elements are contiguous in their storage are views into the
// mapped file; others (transposed views, tied weights sharing one storage
// with different strides) are gathered into memory of their own.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ft/io/mapped_file.hpp"
#include "ft/io/safetensors.hpp"

namespace ft::io {

namespace torch_detail {

// One stored entry of a zip archive.
struct ZipEntry {
  std::uint64_t offset = 0, size = 0;
};

class Zip {
public:
  Zip(std::span<const std::byte> bytes, std::string where) : b_(bytes), where_(std::move(where)) { read_directory(); }

  const std::map<std::string, ZipEntry>& entries() const { return entries_; }
  std::span<const std::byte> data(const ZipEntry& e) const { return b_.subspan(e.offset, e.size); }

private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + what); }
  std::uint64_t u(std::uint64_t at, int n) const {
    if (at + std::uint64_t(n) > b_.size()) fail("zip structure runs past the end of the file (truncated?)");
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | std::uint64_t(b_[at + std::uint64_t(i)]);
    return v;
  }

  void read_directory() {
    // The end-of-central-directory record sits in the last 22 + 65535 bytes.
    if (b_.size() < 22) fail("too short to be a zip archive (torch.save writes zip archives)");
    std::uint64_t eocd = b_.size() - 22;
    const std::uint64_t lowest = b_.size() > 22 + 65535 ? b_.size() - 22 - 65535 : 0;
    while (u(eocd, 4) != 0x06054b50) {
      if (eocd == lowest) fail("not a zip archive (no end of central directory); is it a legacy torch.save file?");
      --eocd;
    }
    std::uint64_t count = u(eocd + 10, 2), directory = u(eocd + 16, 4);
    if ((count == 0xffff || directory == 0xffffffff) && eocd >= 20 && u(eocd - 20, 4) == 0x07064b50) {
      std::uint64_t record = u(eocd - 20 + 8, 8);  // zip64 end of central directory
      if (u(record, 4) != 0x06064b50) fail("broken zip64 end of central directory");
      count = u(record + 32, 8);
      directory = u(record + 48, 8);
    }
    if (count > b_.size() / 46) fail("zip directory claims " + std::to_string(count) + " entries, more than fit");
    std::uint64_t at = directory;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (u(at, 4) != 0x02014b50) fail("broken zip central directory");
      std::uint64_t method = u(at + 10, 2), size = u(at + 24, 4), compressed = u(at + 20, 4);
      std::uint64_t name_len = u(at + 28, 2), extra_len = u(at + 30, 2), comment_len = u(at + 32, 2);
      std::uint64_t local = u(at + 42, 4);
      u(at + 46 + name_len + extra_len + comment_len - 1, 1);  // the entry fits in the file
      std::string name(reinterpret_cast<const char*>(b_.data() + at + 46), name_len);
      // Zip64 extra field: 8-byte values for the fields saturated above, in order.
      for (std::uint64_t e = at + 46 + name_len; e + 4 <= at + 46 + name_len + extra_len;) {
        std::uint64_t id = u(e, 2), len = u(e + 2, 2), field = e + 4;
        if (id == 1) {
          if (size == 0xffffffff) size = u(field, 8), field += 8;
          if (compressed == 0xffffffff) compressed = u(field, 8), field += 8;
          if (local == 0xffffffff) local = u(field, 8);
        }
        e += 4 + len;
      }
      if (method != 0) fail("zip entry \"" + name + "\" is compressed; torch.save stores entries uncompressed");
      if (u(local, 4) != 0x04034b50) fail("zip entry \"" + name + "\" has no local header");
      std::uint64_t data = local + 30 + u(local + 26, 2) + u(local + 28, 2);
      if (data > b_.size() || size > b_.size() - data)
        fail("zip entry \"" + name + "\" runs past the end of the file (truncated?)");
      entries_[name] = {data, size};
      at += 46 + name_len + extra_len + comment_len;
    }
  }

  std::span<const std::byte> b_;
  std::string where_;
  std::map<std::string, ZipEntry> entries_;
};

// The values a state-dict pickle builds.
struct Storage {
  std::string dtype;  // safetensors spelling
  std::string key;
};
struct Tensor {
  Storage storage;
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape, stride;
};
struct Value;
using List = std::vector<Value>;
struct Global {
  std::string name;  // "module.name"
};
struct Mark {};
struct Value {
  std::variant<std::monostate, bool, std::int64_t, double, std::string, List, Global, Storage, Tensor, Mark,
               std::shared_ptr<std::vector<std::pair<Value, Value>>>>
      v;
};
using Dict = std::vector<std::pair<Value, Value>>;

class Unpickler {
public:
  Unpickler(std::span<const std::byte> bytes, std::string where) : b_(bytes), where_(std::move(where)) {}

  Value run() {
    while (true) {
      const auto op = std::uint8_t(byte());
      switch (op) {
        case 0x80: byte(); break;                                   // PROTO
        case 0x95: take(8); break;                                  // FRAME
        case '}': push(Value{std::make_shared<Dict>()}); break;     // EMPTY_DICT
        case ']': push(Value{List{}}); break;                       // EMPTY_LIST
        case ')': push(Value{List{}}); break;                       // EMPTY_TUPLE
        case '(': push(Value{Mark{}}); break;                       // MARK
        case 'N': push(Value{}); break;                             // NONE
        case 0x88: push(Value{true}); break;                        // NEWTRUE
        case 0x89: push(Value{false}); break;                       // NEWFALSE
        case 'K': push(Value{std::int64_t(integer(1))}); break;     // BININT1
        case 'M': push(Value{std::int64_t(integer(2))}); break;     // BININT2
        case 'J': push(Value{std::int64_t(std::int32_t(integer(4)))}); break;  // BININT
        case 0x8a: push(Value{long1()}); break;                     // LONG1
        case 'G': push(Value{binfloat()}); break;                   // BINFLOAT
        case 'X': push(Value{text(integer(4))}); break;             // BINUNICODE
        case 0x8c: push(Value{text(integer(1))}); break;            // SHORT_BINUNICODE
        case 'T': push(Value{text(integer(4))}); break;             // BINSTRING
        case 'U': push(Value{text(integer(1))}); break;             // SHORT_BINSTRING
        case 'c': {                                                 // GLOBAL
          std::string module = line(), name = line();
          push(Value{Global{module + "." + name}});
          break;
        }
        case 0x93: {                                                // STACK_GLOBAL
          std::string name = as<std::string>(pop()), module = as<std::string>(pop());
          push(Value{Global{module + "." + name}});
          break;
        }
        case 't': push(Value{pop_to_mark()}); break;                // TUPLE
        case 0x85: push(Value{tuple(1)}); break;                    // TUPLE1
        case 0x86: push(Value{tuple(2)}); break;                    // TUPLE2
        case 0x87: push(Value{tuple(3)}); break;                    // TUPLE3
        case 'q': memo(integer(1)); break;                          // BINPUT
        case 'r': memo(integer(4)); break;                          // LONG_BINPUT
        case 0x94: memo(memo_.size()); break;                       // MEMOIZE
        case 'h': push(recall(integer(1))); break;                  // BINGET
        case 'j': push(recall(integer(4))); break;                  // LONG_BINGET
        case 'Q': push(persistent(pop())); break;                   // BINPERSID
        case 'R': {                                                 // REDUCE
          List args = as<List>(pop());
          push(reduce(as<Global>(pop()), std::move(args)));
          break;
        }
        case 0x81: {                                                // NEWOBJ: cls.__new__(cls, *args)
          List args = as<List>(pop());
          push(reduce(as<Global>(pop()), std::move(args)));
          break;
        }
        case 'b': pop(); break;                                     // BUILD: state of an OrderedDict; unused
        case 's': {                                                 // SETITEM
          Value value = pop(), key = pop();
          dict(top()).emplace_back(std::move(key), std::move(value));
          break;
        }
        case 'u': {                                                 // SETITEMS
          List items = pop_to_mark();
          if (items.size() % 2) fail("SETITEMS with an odd number of items");
          for (std::size_t i = 0; i < items.size(); i += 2) dict(top()).emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'a': {                                                 // APPEND
          Value value = pop();
          list(top()).push_back(std::move(value));
          break;
        }
        case 'e': {                                                 // APPENDS
          List items = pop_to_mark();
          for (Value& x : items) list(top()).push_back(std::move(x));
          break;
        }
        case '.': return pop();                                     // STOP
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("pickle opcode ") + hex + " is not one a state dict of tensors uses");
        }
      }
    }
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(where_ + what + " (at byte " + std::to_string(at_) + " of data.pkl)");
  }
  std::span<const std::byte> take(std::uint64_t n) {
    if (n > b_.size() - at_) fail("pickle runs past its end");
    auto s = b_.subspan(at_, n);
    at_ += n;
    return s;
  }
  std::byte byte() { return take(1)[0]; }
  std::uint64_t integer(int n) {
    auto s = take(std::uint64_t(n));
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | std::uint64_t(s[std::size_t(i)]);
    return v;
  }
  std::int64_t long1() {
    auto n = integer(1);
    if (n > 8) fail("integer wider than 64 bits");
    auto s = take(n);
    std::uint64_t v = 0;
    for (std::uint64_t i = n; i-- > 0;) v = (v << 8) | std::uint64_t(s[i]);
    if (n > 0 && n < 8 && (std::uint8_t(s[n - 1]) & 0x80)) v |= ~std::uint64_t(0) << (8 * n);  // sign-extend
    return std::int64_t(v);
  }
  double binfloat() {
    auto bits = integer(8);  // big-endian in pickle
    std::uint64_t swapped = 0;
    for (int i = 0; i < 8; ++i) swapped = (swapped << 8) | ((bits >> (8 * i)) & 0xff);
    return std::bit_cast<double>(swapped);
  }
  std::string text(std::uint64_t n) {
    auto s = take(n);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  std::string line() {
    std::string s;
    for (std::byte c; (c = byte()) != std::byte('\n');) s += char(c);
    return s;
  }

  void push(Value v) {
    if (stack_.size() > 1'000'000) fail("pickle stack too deep");
    stack_.push_back(std::move(v));
  }
  Value pop() {
    if (stack_.empty() || std::holds_alternative<Mark>(stack_.back().v)) fail("pickle pops an empty stack");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.empty()) fail("pickle uses an empty stack");
    return stack_.back();
  }
  List pop_to_mark() {
    std::size_t mark = stack_.size();
    while (mark > 0 && !std::holds_alternative<Mark>(stack_[mark - 1].v)) --mark;
    if (mark == 0) fail("pickle has no MARK to close");
    List items(std::make_move_iterator(stack_.begin() + std::ptrdiff_t(mark)), std::make_move_iterator(stack_.end()));
    stack_.resize(mark - 1);
    return items;
  }
  List tuple(std::size_t n) {
    List items(n);
    for (std::size_t i = n; i-- > 0;) items[i] = pop();
    return items;
  }
  // The memo is sparse: a pickle may name any 32-bit index, and a dense
  // table would let a few bytes of input allocate gigabytes.
  void memo(std::uint64_t index) { memo_[index] = top(); }
  Value recall(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("pickle reads memo " + std::to_string(index) + " before writing it");
    return it->second;
  }
  template <class T>
  T& as(Value& v) {
    if (!std::holds_alternative<T>(v.v)) fail("unexpected value type in the state dict pickle");
    return std::get<T>(v.v);
  }
  template <class T>
  T as(Value&& v) {
    return std::move(as<T>(v));
  }
  Dict& dict(Value& v) { return *as<std::shared_ptr<Dict>>(v); }
  List& list(Value& v) { return as<List>(v); }

  static std::string storage_dtype(const std::string& type) {
    static const std::map<std::string, std::string> types{
        {"torch.FloatStorage", "F32"}, {"torch.HalfStorage", "F16"}, {"torch.BFloat16Storage", "BF16"},
        {"torch.DoubleStorage", "F64"}, {"torch.LongStorage", "I64"}, {"torch.IntStorage", "I32"},
        {"torch.ShortStorage", "I16"}, {"torch.CharStorage", "I8"},   {"torch.ByteStorage", "U8"},
        {"torch.BoolStorage", "BOOL"}};
    auto it = types.find(type);
    return it == types.end() ? std::string() : it->second;
  }

  Value persistent(Value id) {
    List& t = as<List>(id);
    if (t.size() < 5 || as<std::string>(t[0]) != "storage") fail("persistent id is not a tensor storage");
    const std::string type = as<Global>(t[1]).name, dtype = storage_dtype(type);
    if (dtype.empty()) fail("storage type " + type + " is not supported");
    return Value{Storage{dtype, as<std::string>(t[2])}};
  }

  std::vector<std::int64_t> ints(Value& v) {
    std::vector<std::int64_t> out;
    for (Value& x : as<List>(v)) out.push_back(as<std::int64_t>(x));
    return out;
  }

  Value reduce(const Global& callable, List args) {
    if (callable.name == "collections.OrderedDict") return Value{std::make_shared<Dict>()};
    if (callable.name == "torch._utils._rebuild_parameter" && !args.empty()) return std::move(args[0]);
    if (callable.name == "torch._utils._rebuild_tensor_v2" && args.size() >= 4) {
      Tensor t;
      t.storage = as<Storage>(args[0]);
      t.offset = as<std::int64_t>(args[1]);
      t.shape = ints(args[2]);
      t.stride = ints(args[3]);
      if (t.shape.size() != t.stride.size()) fail("tensor size and stride differ in length");
      return Value{std::move(t)};
    }
    fail("the pickle builds " + callable.name + ", which ft does not load (only state dicts of plain tensors)");
  }

  std::span<const std::byte> b_;
  std::string where_;
  std::uint64_t at_ = 0;
  List stack_;
  std::map<std::uint64_t, Value> memo_;
};

}  // namespace torch_detail

// The tensors of a torch.save'd state dict, as views that keep the file mapped.
inline std::vector<TensorView> read_torch_checkpoint(const std::filesystem::path& file) {
  const std::string where = file.string() + ": ";
  auto mapping = map_file_readonly(file, "a torch checkpoint", 22, "a zip archive");
  torch_detail::Zip zip(mapping->bytes(), where);

  std::string prefix;
  const torch_detail::ZipEntry* pickle = nullptr;
  for (const auto& [name, entry] : zip.entries())
    if (name.size() >= 8 && name.compare(name.size() - 8, 8, "data.pkl") == 0) {
      prefix = name.substr(0, name.size() - 8);
      pickle = &entry;
    }
  if (!pickle) throw Error(where + "no data.pkl in the archive; not a torch.save file");

  torch_detail::Value root = torch_detail::Unpickler(zip.data(*pickle), where).run();
  auto* dict = std::get_if<std::shared_ptr<torch_detail::Dict>>(&root.v);
  if (!dict) throw Error(where + "the pickle is not a state dict (a mapping of names to tensors)");

  std::vector<TensorView> tensors;
  for (auto& [key, value] : **dict) {
    auto* name = std::get_if<std::string>(&key.v);
    auto* t = std::get_if<torch_detail::Tensor>(&value.v);
    if (!name) throw Error(where + "a state dict key is not a string");
    if (!t) throw Error(where + "\"" + *name + "\" is not a tensor");
    auto entry = zip.entries().find(prefix + "data/" + t->storage.key);
    if (entry == zip.entries().end())
      throw Error(where + "\"" + *name + "\" refers to storage " + t->storage.key + ", which the archive lacks");
    std::span<const std::byte> storage = zip.data(entry->second);
    const std::int64_t element = std::int64_t(detail::dtype_size(t->storage.dtype));

    TensorView view;
    view.name = *name;
    view.dtype = t->storage.dtype;
    view.shape = t->shape;
    std::int64_t numel = 1, last = t->offset;  // the furthest element the view reaches
    bool contiguous = true;
    for (std::size_t d = t->shape.size(); d-- > 0;) {
      if (t->shape[d] < 0 || t->stride[d] < 0) throw Error(where + "\"" + *name + "\" has a negative size or stride");
      if (t->shape[d] != 1 && t->stride[d] != numel) contiguous = false;
      if (t->shape[d] > 0 && numel > std::numeric_limits<std::int64_t>::max() / std::max<std::int64_t>(t->shape[d], 1))
        throw Error(where + "\"" + *name + "\" has an absurd size");
      numel *= t->shape[d];
      if (t->shape[d] > 0) last += (t->shape[d] - 1) * t->stride[d];
    }
    if (t->offset < 0 || (numel > 0 && (last + 1) * element > std::int64_t(storage.size())))
      throw Error(where + "\"" + *name + "\" reaches past the end of its storage");
    if (contiguous) {
      view.bytes = storage.subspan(std::size_t(t->offset * element), std::size_t(numel * element));
      view.mapping = mapping;
    } else {  // gather a strided view into memory of its own
      auto owned = std::make_shared<std::vector<std::byte>>(std::size_t(numel * element));
      std::vector<std::int64_t> index(t->shape.size(), 0);
      for (std::int64_t i = 0; i < numel; ++i) {
        std::int64_t source = t->offset;
        for (std::size_t d = 0; d < index.size(); ++d) source += index[d] * t->stride[d];
        std::memcpy(owned->data() + i * element, storage.data() + source * element, std::size_t(element));
        for (std::size_t d = index.size(); d-- > 0;) {
          if (++index[d] < t->shape[d]) break;
          index[d] = 0;
        }
      }
      view.bytes = *owned;
      view.mapping = owned;
    }
    tensors.push_back(std::move(view));
  }
  return tensors;
}

}  // namespace ft::io
