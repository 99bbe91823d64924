// Symbolic shapes for fusedops_trt_harness's walk (walk.cpp only).
#pragma once

#include "harness.h"

namespace fusedops_harness {

// ---------------------------------------------------------------------------------------------------------------------
// Symbolic dimension expressions: the public wrappers IDimensionExpr / IExprBuilder backed by our own apiv
// implementations. An expression is a small tree over named symbols, so the harness can evaluate one output shape at
// the actual, min, opt and max bindings, and see whether the plugin kept the batch dimension symbolic.
// ---------------------------------------------------------------------------------------------------------------------
class Expr : public IDimensionExpr {
 public:
  enum class Kind { kConstant, kSymbol, kOperation };

  Expr(Kind kind, int64_t value, int32_t symbol, DimensionOperation op, Expr const* lhs, Expr const* rhs)
      : kind(kind), value(value), symbol(symbol), op(op), lhs(lhs), rhs(rhs) {
    mImplObject.owner = this;
    mImpl = &mImplObject;
  }
  ~Expr() noexcept override = default;

  // Value under a binding of the symbols; false on division by zero.
  bool eval(std::vector<int64_t> const& binding, int64_t& out) const {
    switch (kind) {
      case Kind::kConstant: out = value; return true;
      case Kind::kSymbol: out = binding.at(symbol); return true;
      case Kind::kOperation: break;
    }
    int64_t a = 0, b = 0;
    if (!lhs->eval(binding, a) || !rhs->eval(binding, b)) return false;
    return apply(op, a, b, out);
  }

  static bool apply(DimensionOperation op, int64_t a, int64_t b, int64_t& out) {
    switch (op) {
      case DimensionOperation::kSUM: out = a + b; return true;
      case DimensionOperation::kPROD: out = a * b; return true;
      case DimensionOperation::kMAX: out = std::max(a, b); return true;
      case DimensionOperation::kMIN: out = std::min(a, b); return true;
      case DimensionOperation::kSUB: out = a - b; return true;
      case DimensionOperation::kEQUAL: out = a == b; return true;
      case DimensionOperation::kLESS: out = a < b; return true;
      case DimensionOperation::kFLOOR_DIV:
        if (b == 0) return false;
        out = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
        return true;
      case DimensionOperation::kCEIL_DIV:
        if (b == 0) return false;
        out = -((-a) / b - (((-a) % b != 0) && (((-a) < 0) != (b < 0))));
        return true;
    }
    return false;
  }

  std::string text(std::vector<std::string> const& names) const {
    static char const* const kOps[] = {"+", "*", "max", "min", "-", "==", "<", "//", "ceildiv"};
    switch (kind) {
      case Kind::kConstant: return std::to_string(value);
      case Kind::kSymbol: return names.at(symbol);
      case Kind::kOperation: break;
    }
    return "(" + lhs->text(names) + " " + kOps[static_cast<int>(op)] + " " + rhs->text(names) + ")";
  }

  Kind kind;
  int64_t value;
  int32_t symbol;
  DimensionOperation op;
  Expr const* lhs;
  Expr const* rhs;

 private:
  struct Impl : apiv::VDimensionExpr {
    Expr* owner = nullptr;
    bool isConstant() const override { return owner->kind == Kind::kConstant; }
    // A non-constant expression has no value; a plugin that asks anyway gets an absurd one and fails visibly.
    int64_t getConstantValue() const override { return isConstant() ? owner->value : INT64_MIN; }
    bool isSizeTensor() const override { return false; }
  } mImplObject;
};

class ExprBuilder : public IExprBuilder {
 public:
  ExprBuilder() {
    mImplObject.owner = this;
    mImpl = &mImplObject;
  }
  ~ExprBuilder() noexcept override = default;

  Expr const* makeConstant(int64_t v) { return add(Expr::Kind::kConstant, v, -1, DimensionOperation::kSUM, nullptr, nullptr); }
  Expr const* makeSymbol(std::string name) {
    names.push_back(std::move(name));
    return add(Expr::Kind::kSymbol, 0, static_cast<int32_t>(names.size() - 1), DimensionOperation::kSUM, nullptr,
               nullptr);
  }
  Expr const* makeOperation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) {
    auto const* ea = owned(&a);
    auto const* eb = owned(&b);
    if (ea == nullptr || eb == nullptr) {
      foreignExpressions = true;
      return nullptr;
    }
    int64_t v = 0;
    if (ea->kind == Expr::Kind::kConstant && eb->kind == Expr::Kind::kConstant && Expr::apply(op, ea->value, eb->value, v))
      return makeConstant(v);  // constant folding, as TensorRT does
    return add(Expr::Kind::kOperation, 0, -1, op, ea, eb);
  }
  // Expressions the plugin returns must be ones this builder made (or the input expressions).
  Expr const* owned(IDimensionExpr const* e) const {
    for (auto const& p : mExprs)
      if (p.get() == e) return p.get();
    return nullptr;
  }

  std::vector<std::string> names;
  bool foreignExpressions = false;
  bool declaredSizeTensor = false;

 private:
  Expr const* add(Expr::Kind kind, int64_t v, int32_t sym, DimensionOperation op, Expr const* a, Expr const* b) {
    mExprs.push_back(std::make_unique<Expr>(kind, v, sym, op, a, b));
    return mExprs.back().get();
  }
  struct Impl : apiv::VExprBuilder {
    ExprBuilder* owner = nullptr;
    IDimensionExpr const* constant(int64_t value) override { return owner->makeConstant(value); }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override {
      return owner->makeOperation(op, a, b);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override {
      owner->declaredSizeTensor = true;  // our ops have no data-dependent shapes
      return nullptr;
    }
  } mImplObject;
  std::deque<std::unique_ptr<Expr>> mExprs;
};


}  // namespace fusedops_harness
